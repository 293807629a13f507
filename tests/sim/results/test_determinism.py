"""Same seed and inputs → byte-identical Parquet; another seed → different results."""

from __future__ import annotations

from sim.contracts.scenario import load_scenario
from sim.results.runner import run_scenario
from tests.helpers import NGRAM_K3, scenario_toml, segment, write_scenario

SCENARIO = scenario_toml(
    'det',
    run={'duration_s': 60, 'warmup_s': 5, 'seeds': [3]},
    workload={'arrival': 'poisson', 'rate': 3.0, 'client_timeout_s': 20},
    segments=[segment(prompt={'dist': 'lognormal', 'median': 200, 'sigma': 0.7, 'min': 8, 'max': 2048}, output={'dist': 'lognormal', 'median': 60, 'sigma': 0.7, 'min': 1, 'max': 400})],
    slo={'ttft_ms': 500},
    fleet={'profile': 'profile.json', 'replicas': 2, 'routing': 'round_robin', 'price_per_gpu_hour': 1.0},
    engine={'max_num_seqs': 16, 'max_num_batched_tokens': 256},
    candidates=[NGRAM_K3, {'name': 'ngram-adaptive', 'proposer': 'ngram', 'policy': 'adaptive', 'k': 4, 'adaptive': {'on_below_batch': 2, 'off_above_batch': 6, 'window_s': 2.0}}],
)


def write_all(tmp_path, name: str, seeds: list[int]) -> dict[str, bytes]:
    p = write_scenario(tmp_path, SCENARIO)
    res = run_scenario(load_scenario(p), seeds=seeds)
    out = tmp_path / name
    return {path.name: path.read_bytes() for path in res.write(out)}


def test_same_seed_gives_byte_identical_files(tmp_path) -> None:
    a = write_all(tmp_path, "a", [3])
    b = write_all(tmp_path, "b", [3])
    assert a.keys() == {"requests.parquet", "steps.parquet", "summary.parquet", "summary.json"}
    for name in a:
        assert a[name] == b[name], name


def test_other_seed_differs(tmp_path) -> None:
    a = write_all(tmp_path, "a", [3])
    c = write_all(tmp_path, "c", [4])
    assert a["requests.parquet"] != c["requests.parquet"]

"""Scenario overrides, load scaling and TOML round trips: what the dashboard and the sweeps change in a
loaded scenario is validated again, and every feature survives writing and reading back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.scenario import Scenario, load_scenario
from sim.contracts.toml_writer import dumps_toml
from tests.helpers import MINIMAL_SCENARIO, load_scenario_text

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def default() -> Scenario:
    return load_scenario(REPO / "scenarios" / "default.toml")


def test_overrides_apply_and_revalidate(default: Scenario) -> None:
    s = default.with_overrides(
        {
            "workload.rate": 3.0,
            "fleet.replicas": 2,
            "fleet.engine.memory_utilization": 0.5,
            "slo.ttft_ms": 750,
            "run.seeds": [7, 8],
            "candidates[ngram-k3].k": 2,
            "workload.segments[support-en].share": 0.9,
            "workload.segments[1].temperature": 0.7,
        }
    )
    assert s.workload.rate == 3.0 and s.fleet.replicas == 2
    assert s.fleet.engine.memory_utilization == 0.5 and s.slo.ttft_ms == 750.0
    assert s.run.seeds == (7, 8) and s.candidate("ngram-k3").k == 2
    assert s.workload.segments[0].share == 0.9 and s.workload.segments[1].temperature == 0.7
    # the original is untouched, and unrelated fields are equal
    assert default.workload.rate == 0.45 and default.candidate("ngram-k3").k == 3
    assert s.fleet.engine.block_size == default.fleet.engine.block_size
    assert s.origin == default.origin and s.profile_path == default.profile_path


def test_override_switch_to_gamma(default: Scenario) -> None:
    s = default.with_overrides({"workload.arrival": "gamma", "workload.burstiness": 0.5})
    assert s.workload.arrival == "gamma" and s.workload.burstiness == 0.5


def test_override_none_removes_field(default: Scenario) -> None:
    s = default.with_overrides({"slo.tpot_ms": None})
    assert "tpot" not in s.slo.limits and "ttft" in s.slo.limits


def test_override_creates_missing_table(default: Scenario) -> None:
    s = default.with_overrides({"fleet.restart": {"at_s": 100, "cold_start_s": 30}})
    assert s.fleet.restart is not None and s.fleet.restart.fallback == "baseline"
    s2 = s.with_overrides({"fleet.restart.at_s": 200})
    assert s2.fleet.restart is not None and s2.fleet.restart.at_s == 200.0


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("workload.rte", 1.0, "override 'workload.rte': unknown field 'workload.rte'; valid: arrival, segments, rate"),
        ("flet.replicas", 1, "unknown field 'flet'; valid: name, run, workload, fleet"),
        ("candidates[nope].k", 2, "no item 'nope' in candidates; valid: baseline, ngram-k3"),
        ("workload.rate.x", 1, "workload.rate is a value, not a table"),
        ("run[0].seeds", 1, "run is not a list of tables"),
        ("workload..rate", 1, "cannot parse"),
    ],
)
def test_override_unknown_path(default: Scenario, path: str, value: object, expected: str) -> None:
    with pytest.raises(SpecplanError) as info:
        default.with_overrides({path: value})
    assert expected in str(info.value)


def test_override_invalid_value_is_revalidated(default: Scenario) -> None:
    with pytest.raises(SpecplanError, match=r"workload\.rate: must be > 0 req/s.*after overrides workload\.rate = -1"):
        default.with_overrides({"workload.rate": -1})
    with pytest.raises(SpecplanError, match=r"fleet\.restart\.replica: must be < replicas \(1\)"):
        default.with_overrides({"fleet.restart": {"at_s": 10, "cold_start_s": 1, "replica": 3}})


def test_override_numpy_values(default: Scenario) -> None:
    import numpy as np

    s = default.with_overrides({"fleet.replicas": np.int64(3), "workload.rate": np.float64(0.5)})
    assert s.fleet.replicas == 3 and isinstance(s.fleet.replicas, int) and s.workload.rate == 0.5


def test_load_scale_every_arrival_kind(default: Scenario, tmp_path: Path) -> None:
    assert default.with_load_scale(2.0).workload.rate == pytest.approx(2 * (default.workload.rate or 0))
    peak = load_scenario(REPO / "scenarios" / "decision-grid-peak.toml")
    pw = peak.with_load_scale(0.5).workload.piecewise
    assert peak.workload.piecewise is not None and pw is not None
    assert [r for _, r in pw.points] == pytest.approx([r / 2 for _, r in peak.workload.piecewise.points])
    with pytest.raises(SpecplanError, match="load scale must be"):
        default.with_load_scale(0.0)


# ---------------------------------------------------------------------------- TOML writer


def test_to_toml_round_trip_with_every_feature(tmp_path: Path) -> None:
    text = MINIMAL_SCENARIO.replace('arrival = "poisson"\nrate = 1.0', 'arrival = "piecewise"\n'
                           'piecewise = {shape = "daily", points = [[0, 0.5], [12, 3.0]], start_h = 9.5}')
    text += (
        "[slo]\nttft_ms = 1500\n"
        '[fleet]\nprofile = "p.json"\nreplicas = 2\nprice_per_gpu_hour = 1.25\n'
        '[fleet.restart]\nat_s = 10\ncold_start_s = 5\nreplica = 1\non_restart = "drop"\n'
        '[[candidates]]\nname = "kb"\nproposer = "ngram"\npolicy = "k_by_batch"\n'
        "k_by_batch = [[1, 4], [8, 2], [16, 0]]\n"
        '[[candidates]]\nname = "ad"\nproposer = "selfdraft-l6"\npolicy = "adaptive"\nk = 3\n'
        "adaptive = {on_below_batch = 2, off_above_batch = 6}\nassumed_acceptance = [0.7, 0.5, 0.2]\n"
    )
    s = load_scenario_text(tmp_path, 'description = "quotes \\" and ünïcode"\n' + text)
    out = s.to_toml()
    again = Scenario.from_dict(tomllib.loads(out), s.origin, s.base_dir)
    assert again == s
    assert again.description == 'quotes " and ünïcode'
    assert again.candidate("kb").k_by_batch == ((1, 4), (8, 2), (16, 0))


def test_dumps_toml_generic() -> None:
    doc = {"a": 1, "b": [1.5, "x"], "t": {"c": True, "inner": {"d": "é"}},
           "arr": [{"n": 1, "m": {"k": 2}}, {"n": 2}]}
    assert tomllib.loads(dumps_toml(doc)) == doc


def test_documented_example_loads(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    start = doc.index("```toml\n") + len("```toml\n")
    text = doc[start : doc.index("```", start)]
    s = load_scenario_text(tmp_path, text)
    assert s.candidate_names[:2] == ("baseline", "ngram-k3")
    assert s.candidate("ngram-by-batch").max_k == 5
    assert s.candidate("ngram-assumed").assumed_acceptance == (0.7, 0.5, 0.35)
    assert s.fleet.restart is not None and s.fleet.restart.at_s == 300.0
    assert s.fleet.request_overhead is not None and s.fleet.request_overhead.fixed_ms == 10.0


def test_documented_trace_examples_load(tmp_path: Path) -> None:
    import tomllib

    from sim.contracts.dataclass_mapping import from_mapping
    from sim.contracts.trace_config import TraceConfig

    doc = (REPO / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    block = doc[doc.index("# Mooncake (hash_ids kept"):]
    block = block[: block.index("```")]
    lines = [ln for ln in block.splitlines() if ln.startswith("trace = ")]
    assert len(lines) == 5
    for ln in lines:
        table = tomllib.loads(ln)["trace"]
        (tmp_path / table["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / table["path"]).write_text("")
        tc = from_mapping(TraceConfig, table, "workload.trace", {"base_dir": str(tmp_path)})
        assert tc.resolved_path == (tmp_path / table["path"]).resolve()


def test_integral_floats_accepted_for_ints(default: Scenario) -> None:
    assert default.with_overrides({"fleet.replicas": 2.0}).fleet.replicas == 2
    with pytest.raises(SpecplanError, match=r"fleet\.replicas: expected an integer, got float 2\.5"):
        default.with_overrides({"fleet.replicas": 2.5})


def test_scenario_pickles_and_hashes(default: Scenario) -> None:
    import pickle

    again = pickle.loads(pickle.dumps(default))
    assert again == default and hash(again) == hash(default)
    assert again.profile_path == default.profile_path


def test_dumps_toml_round_trips_arbitrary_documents() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    keys = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
    scalars = (
        st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
    )
    values = st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4), max_leaves=8
    )
    leaf_table = st.dictionaries(keys, values, max_size=4)
    tables = st.recursive(
        leaf_table,
        lambda inner: st.dictionaries(
            keys, values | inner | st.lists(leaf_table, min_size=1, max_size=3), max_size=4
        ),
        max_leaves=6,
    )

    @settings(max_examples=150, deadline=None)
    @given(tables)
    def check(doc: dict) -> None:
        assert tomllib.loads(dumps_toml(doc)) == doc

    check()


def test_a_profile_path_that_is_a_device_says_so_once(tmp_path):
    """``profile = "/dev/null"`` exists but is no file: the message says that, and names the
    absolute path once (not "looked in X or X")."""
    from tests.helpers import scenario_toml, segment, write_scenario

    text = scenario_toml("dev", run={"duration_s": 10, "seeds": [1]}, workload={"arrival": "poisson", "rate": 1.0},
                         segments=[segment(prompt=8, output=4)], fleet={"profile": "/dev/null"},
                         candidates=[{"name": "baseline", "speculation": "off"}])
    sc = load_scenario(write_scenario(tmp_path, text))
    with pytest.raises(SpecplanError) as err:
        sc.require_profile_path()
    msg = str(err.value)
    assert "is not a regular file" in msg and msg.count("/dev/null") == 1, msg

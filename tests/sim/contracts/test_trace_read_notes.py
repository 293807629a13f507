"""Nothing a trace's rows assume passes unsaid: 0-token lengths are replayed as 1 with a note
naming the field, count and first line; ``hash_ids`` that do not cover the prompt exactly are
refused naming line, expected and found; arrivals on a coarse time grid get a note."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.trace import read_trace
from sim.contracts.trace_config import TraceColumns, TraceConfig
from sim.contracts.trace_formats.read_notes import arrival_grid

FIXTURES = Path(__file__).resolve().parent / "traces"
TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
_COLS = TraceColumns(timestamp="t", prompt_tokens="p", output_tokens="o", timestamp_unit="ms")


def _write(folder: Path, fmt: str, ms: list[int], prompt: list[int], output: list[int]) -> TraceConfig:
    """The rows in ``fmt``'s documented layout (one row a line after any header)."""
    rows = list(zip(ms, prompt, output, strict=True))
    if fmt == "azure":
        text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
            f"2023-11-16 {t // 3_600_000:02d}:{t // 60_000 % 60:02d}:{t // 1000 % 60:02d}.{t % 1000:03d},{p},{o}\n"
            for t, p, o in rows)
    elif fmt == "burstgpt":
        text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
            f"{t / 1000},ChatGPT,{p},{o},{p + o},API log\n" for t, p, o in rows)
    elif fmt == "mooncake":
        text = "".join(json.dumps({"timestamp": t, "input_length": p, "output_length": o,
                                   "hash_ids": list(range(math.ceil(p / 512)))}) + "\n" for t, p, o in rows)
    elif fmt == "jsonl":
        text = "".join(json.dumps({"t": t, "p": p, "o": o}) + "\n" for t, p, o in rows)
    else:
        text = "t,p,o\n" + "".join(f"{t},{p},{o}\n" for t, p, o in rows)
    path = folder / f"t-{fmt}.txt"
    path.write_text(text, encoding="utf-8")
    return TraceConfig(path=str(path), format=fmt,  # type: ignore[arg-type]
                       columns=_COLS if fmt in ("csv", "jsonl") else None)


_FIELDS = {  # format: (prompt field, output field); BurstGPT leaves 0-output rows out (failed)
    "azure": ("ContextTokens", "GeneratedTokens"), "burstgpt": ("Request tokens", None),
    "mooncake": ("input_length", "output_length"), "csv": ("p", "o"), "jsonl": ("p", "o"),
}


@pytest.mark.parametrize("fmt", sorted(_FIELDS))
@settings(max_examples=15, deadline=None)
@given(data=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=12))
def test_zero_token_rows_are_counted_with_their_first_line(tmp_path_factory: pytest.TempPathFactory, fmt: str,
                                                            data: list[tuple[int, int]]) -> None:
    prompt = [p for p, _ in data]
    output = [o + 1 if fmt == "burstgpt" else o for _, o in data]
    cfg = _write(tmp_path_factory.mktemp("zero"), fmt, [250 * i for i in range(len(data))], prompt, output)
    notes = read_trace(cfg).notes
    first_line = 2 if fmt in ("azure", "burstgpt", "csv") else 1
    for field, counts in zip(_FIELDS[fmt], (prompt, output), strict=True):
        said = [n for n in notes if f" have {field} 0 " in n]
        n_zero = counts.count(0)
        if field is None or n_zero == 0:
            assert not said, notes
            continue
        assert len(said) == 1, notes
        assert f"t-{fmt}.txt: {n_zero:,} of {len(counts):,} rows have {field} 0" in said[0]
        assert f"(first at line {counts.index(0) + first_line})" in said[0]
        assert "replayed as 1" in said[0]


def test_vllm_bench_zero_lengths_name_the_request(tmp_path: Path) -> None:
    obj = json.loads((FIXTURES / "vllm_bench.json").read_text())
    obj["input_lens"][3] = 0  # request 3 succeeded with an empty prompt
    p = tmp_path / "r.json"
    p.write_text(json.dumps(obj), encoding="utf-8")
    notes = read_trace(TraceConfig(path=str(p), format="vllm-bench")).notes
    assert any("1 of 4 rows have input_lens 0 (first at request 3)" in n for n in notes), notes
    assert not any("output_lens 0" in n for n in notes)  # the failed request's 0 is left out, not noted


def test_a_clean_trace_has_no_zero_length_note() -> None:
    tr = read_trace(TraceConfig(path=str(FIXTURES / "mooncake.jsonl")))
    assert not any("replayed as 1" in n for n in tr.notes)


# ---------------------------------------------------------------- hash_ids against the prompt


@settings(max_examples=40, deadline=None)
@given(prompt=st.integers(0, 5000), delta=st.integers(-3, 3).filter(bool))
def test_mooncake_hash_ids_must_cover_the_prompt_exactly(tmp_path_factory: pytest.TempPathFactory,
                                                         prompt: int, delta: int) -> None:
    want = math.ceil(prompt / 512)
    got = want + delta
    folder = tmp_path_factory.mktemp("ids")
    good = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})
    row = {"timestamp": 5, "input_length": prompt, "output_length": 3, "hash_ids": list(range(max(got, 0)))}
    p = folder / "m.jsonl"
    p.write_text(good + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    if got < 0:
        return
    with pytest.raises(SpecplanError) as exc:
        read_trace(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:2: hash_ids has {got:,} block ids, expected {want:,} for input_length {prompt:,}")
    assert "512-token block, the last partial block included" in msg and "\n" not in msg
    row["hash_ids"] = list(range(want))
    p.write_text(good + "\n" + json.dumps(row) + "\n", encoding="utf-8")
    assert read_trace(p).hash_ids_of(1).tolist() == list(range(want))


def test_generic_jsonl_ids_are_held_to_its_block_size(tmp_path: Path) -> None:
    p = tmp_path / "g.jsonl"
    p.write_text('{"t": 0, "p": 40, "o": 2, "ids": [1, 2, 3]}\n{"t": 1, "p": 40, "o": 2, "ids": [1, 2]}\n',
                 encoding="utf-8")
    cols = TraceColumns(timestamp="t", prompt_tokens="p", output_tokens="o", hash_ids="ids", hash_block_tokens=16)
    with pytest.raises(SpecplanError, match=r"g\.jsonl:2: ids has 2 block ids, expected 3 for p 40; valid: one "
                                            r"id per 16-token block"):
        read_trace(TraceConfig(path=str(p), format="jsonl", columns=cols))


# ---------------------------------------------------------------- arrivals on a coarse grid


@settings(max_examples=60, deadline=None)
@given(step_ms=st.sampled_from([1, 10, 1000, 3000]), groups=st.lists(st.integers(2, 12), min_size=10, max_size=60),
       skips=st.randoms(use_true_random=False))
def test_arrivals_on_a_coarse_grid_are_noted(tmp_path_factory: pytest.TempPathFactory, step_ms: int,
                                             groups: list[int], skips) -> None:
    ms: list[int] = []
    slot = 0
    for i, size in enumerate(groups):
        ms += [slot * step_ms] * size
        # some empty slots: still the same grid (the first gap is one slot, so the step is the grid)
        slot += 1 + (skips.randint(0, 3) if i > 0 and skips.random() < 0.3 else 0)
    n = len(ms)
    cfg = _write(tmp_path_factory.mktemp("grid"), "csv", ms, [10] * n, [5] * n)
    notes = [x for x in read_trace(cfg).notes if "grid" in x]
    assert len(notes) == 1, notes
    unit = f"{step_ms // 1000} s" if step_ms >= 1000 else f"{step_ms} ms"
    together = n / len(set(ms))
    assert f"arrivals fall on a {unit} grid: {together:.1f} requests arrive together on average" in notes[0]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rate=st.floats(0.5, 50.0))
def test_poisson_arrivals_in_microseconds_get_no_grid_note(seed: int, rate: float) -> None:
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, 200)
    us = np.rint(np.cumsum(gaps) * 1e6) / 1e6  # a microsecond clock: ties all but impossible
    assert arrival_grid(us - us[0]) is None


def test_a_jittered_grid_as_in_mooncakes_conversation_trace_is_noted(tmp_path: Path) -> None:
    """The first 77 rows of Mooncake's FAST25 conversation_trace.jsonl arrive at these
    milliseconds (one slot logged at 5999, not 6000): a 3 s grid, 8.6 requests a slot."""
    slots = {0: 10, 3000: 16, 5999: 3, 9000: 9, 12000: 8, 15000: 16, 18000: 4, 21000: 6, 24000: 5}
    ms = [t for t, k in slots.items() for _ in range(k)]
    p = tmp_path / "conversation.jsonl"
    p.write_text("".join(json.dumps({"timestamp": t, "input_length": 600, "output_length": 9,
                                     "hash_ids": [0, i + 1]}) + "\n" for i, t in enumerate(ms)), encoding="utf-8")
    notes = [n for n in read_trace(p).notes if "grid" in n]
    assert notes == ["trace conversation.jsonl: arrivals fall on a 3 s grid: 8.6 requests arrive together on "
                     "average; the trace's time resolution may be coarser than its traffic (each group is "
                     "replayed as one burst)"]


def test_ties_off_any_grid_get_no_note() -> None:
    t = np.repeat(np.array([0.0, 1.0, 2.5, 2.7, 4.1]), 5)  # many together, but no common step
    assert arrival_grid(t) is None


@pytest.mark.parametrize("name", ["azure_llm_2023_conv.csv", "azure_llm_2023_code.csv"])
def test_the_public_azure_traces_are_not_on_a_grid(name: str) -> None:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} absent (../shared/traces)")
    tr = read_trace(path)
    assert not [n for n in tr.notes if "grid" in n or "replayed as 1" in n]


def test_validate_against_vllm_results_says_what_it_did_with_zero_lengths(tmp_path: Path) -> None:
    """``validate --vllm-results`` (sim/fidelity/vllm_compare.py) reads the same file: an empty
    prompt is simulated as 1 token, a 0-token answer left out, and both are counted."""
    from sim.contracts.vllm_results import load_vllm_results
    from sim.fidelity.vllm_compare import length_notes, vllm_requests

    obj = json.loads((FIXTURES / "vllm_bench.json").read_text())
    obj["input_lens"][3] = 0
    obj["output_lens"][1] = 0  # request 2 failed with output 0 already: not counted
    p = tmp_path / "r.json"
    p.write_text(json.dumps(obj), encoding="utf-8")
    res = load_vllm_results(p)[0]
    assert length_notes(res) == (
        "vLLM results r.json: 1 successful requests have input_lens 0; simulated with a 1-token prompt",
        "vLLM results r.json: 1 successful requests have output_lens 0; left out of the simulated run "
        "(no token to time)")
    reqs = vllm_requests(res, "chat", None, np.random.default_rng(0))
    assert [r.prompt_tokens for r in reqs] == [512, 1, 300]

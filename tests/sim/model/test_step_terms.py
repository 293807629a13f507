"""A speculative step priced by its parts (issue 37 item 1): sampling over every scored
position, padding to captured CUDA-graph sizes, and the parts' sum being the price.

The synthetic fused profile of ``test_fused_step`` is linear in its axes, so expected values are
hand sums; its dense part is made flat here where a test needs the per-token terms alone to be
what grows.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile
from sim.model.kernels import price_kernels as pk
from sim.model.step_terms import decode_step_terms
from sim.model.step_time import ProfileStepTimer
from tests.helpers import bench_module
from tests.sim.model.test_fused_step import MS, fused_dict

REPO = Path(__file__).resolve().parents[3]
SAMPLE_S = 0.5e-6
SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64]
PROV = {"method": "estimated", "notes": "test"}
ROW_S, SPEC_S, SPEC_ROW_S = 1.1e-6, 15e-6, 0.3e-6
PUB = {"method": "published", "citation": "test", "notes": "test"}


def terms_dict(flat_dense: bool = False) -> dict:
    d = fused_dict()
    t = d["timing"]
    t["sampler"] = {"seconds_per_position": SAMPLE_S, "provenance": PROV}
    t["cuda_graphs"] = {"capture_sizes": SIZES, "provenance": PROV}
    t["host_rows"] = {"seconds_per_row": ROW_S, "spec_seconds": SPEC_S, "spec_seconds_per_row": SPEC_ROW_S,
                      "provenance": PUB}
    if flat_dense:  # every pass part constant in tokens: only per-token terms can grow
        f = t["fused"]
        f["dense"]["median"] = [4.0 * MS] * len(f["dense"]["median"])
        f["logits"]["median"] = [0.2 * MS] * len(f["logits"]["median"])
        da = f["decode_attention"]
        da["median"] = [[[0.1 * MS for _ in row] for row in s] for s in da["median"]]
    return d


def timer(d: dict) -> ProfileStepTimer:
    return ProfileStepTimer(Profile.from_dict(copy.deepcopy(d), "terms"))


def decode(t: ProfileStepTimer, b: int, k: int, c: float = 1000.0) -> float:
    return t.price(b, c, k, "ngram" if k else None, 0, 0.0, None, 0.0, 0, 0, None)


@pytest.mark.parametrize(("tokens", "padded"), [(1, 1), (3, 4), (5, 8), (17, 24), (49, 64), (64, 64), (65, 65), (500, 500)])
def test_graphed_ops_run_at_the_next_captured_size(tokens: int, padded: int) -> None:
    tm = pk.timer_constants(pk.KIND_FUSED, False, 1.0, 1.0, 0.0, capture_sizes=tuple(SIZES))
    assert pk.graph_tokens(tm, float(tokens)) == padded


def _vllm_pad(sizes: list[int], q: int, tokens: int) -> int:
    """vLLM as written: ``adjust_cudagraph_sizes_for_spec_decode`` rounds each capture size up to a
    multiple of q = k + 1 and drops those past the largest (keeping [q] if none is left and q fits),
    then ``pad_for_cudagraph`` takes the next size; above the largest a step is not padded."""
    kept = sizes
    if q > 1:
        kept = sorted({-(-s // q) * q for s in sizes if -(-s // q) * q <= max(sizes)})
        if not kept and q <= max(sizes):
            kept = [q]
    return next((s for s in kept if s >= tokens), tokens)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 600), min_size=1, max_size=40, unique=True), st.integers(1, 9), st.integers(1, 700))
def test_a_speculative_step_pads_to_capture_sizes_rounded_to_multiples_of_k_plus_1(sizes, q, tokens) -> None:
    """Over any capture list, k + 1 and token count: the priced padding is vLLM's; a padded
    speculative step runs at a multiple of k + 1 and never below its tokens."""
    sizes = sorted(sizes)
    tm = pk.timer_constants(pk.KIND_FUSED, False, 1.0, 1.0, 0.0, capture_sizes=tuple(sizes))
    got = pk.graph_tokens(tm, float(tokens), q)
    assert got == _vllm_pad(sizes, q, tokens)
    assert got >= tokens and (got == tokens or got % q == 0)


def test_k_2_at_batch_1_runs_on_a_3_token_graph_where_the_plain_list_has_4() -> None:
    """vLLM's default list (1, 2, 4, 8, …): a k = 2 step of one row runs at 3 tokens, two rows at 6."""
    tm = pk.timer_constants(pk.KIND_FUSED, False, 1.0, 1.0, 0.0, capture_sizes=tuple(SIZES))
    assert [pk.graph_tokens(tm, float(t), 3) for t in (3, 6, 7, 12)] == [3, 6, 9, 18]
    assert [pk.graph_tokens(tm, float(t)) for t in (3, 6, 7, 12)] == [4, 8, 8, 16]


def test_padding_prices_the_dense_part_at_the_captured_size() -> None:
    """5 decode rows, k = 0: dense runs at 8 tokens, the LM head and sampling at 5."""
    with_pad, without = terms_dict(), terms_dict()
    del without["timing"]["cuda_graphs"]
    got = decode(timer(with_pad), 5, 0) - decode(timer(without), 5, 0)
    assert got == pytest.approx((0.01 * 8 - 0.01 * 5) * MS)


def test_sampling_is_charged_per_scored_position() -> None:
    """b rows drafting k score b(k+1) positions; a prompt chunk scores one."""
    on, off = terms_dict(), terms_dict()
    del off["timing"]["sampler"]
    for b, k, n in [(4, 3, 0), (7, 0, 0), (2, 2, 100), (0, 0, 64)]:
        t_on, t_off = timer(on), timer(off)
        args = (b, 500.0, k, "ngram" if k and b else None, n, 0.0, None, 0.0, 0, 0, None)
        assert t_on.price(*args) - t_off.price(*args) == pytest.approx(SAMPLE_S * (b * (k + 1) + (1 if n else 0)))


def test_sampling_is_charged_in_summed_steps_too() -> None:
    d = terms_dict()
    d["timing"]["step_composition"] = "sum"
    off = copy.deepcopy(d)
    del off["timing"]["sampler"]
    assert decode(timer(d), 6, 2) - decode(timer(off), 6, 2) == pytest.approx(SAMPLE_S * 18)


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 200), k=st.integers(0, 4), c=st.integers(0, 8192))
def test_spec_step_price_is_the_sum_of_its_parts(b: int, k: int, c: int) -> None:
    """Dropping a part from the price (or from the breakdown) breaks the equality."""
    t = timer(terms_dict())
    parts = decode_step_terms(t, b, k, float(c), "ngram" if k else None)
    assert sum(p.seconds for p in parts) == pytest.approx(decode(t, b, k, float(c)), rel=1e-12)
    names = " | ".join(p.name for p in parts)
    for part in ("dense ops", "LM head", "attention", "sampling", "per-step host overhead", "host, scheduler update"):
        assert part in names
    if k:
        assert "draft D" in names and "draft host H" in names and "host, verified tokens to lists" in names
    assert all(p.source in ("assumed", "estimated", "assumed + modelled", "published") for p in parts)
    assert all(p.source == "published" for p in parts if p.name.startswith("host, "))


@settings(max_examples=200, deadline=None)
@given(b=st.integers(0, 300), k=st.integers(0, 4), n=st.sampled_from([0, 1, 64, 2048]),
       drafting=st.one_of(st.none(), st.integers(0, 300)), fused=st.booleans())
def test_host_work_is_charged_per_scheduled_request_and_more_on_a_verifying_step(b, k, n, drafting, fused) -> None:
    """timing.host_rows (published: vLLM PR 46112's update_from_output, PR 57888's parse_output):
    every request a step schedules (decode rows, one per prompt chunk) pays the per-request
    time; a step that verifies drafts also pays parse_output, once plus per request."""
    if b == 0 and n == 0:
        n = 1
    drafting = None if drafting is None or not k else min(drafting, b)
    on, off = terms_dict(), terms_dict()
    del off["timing"]["host_rows"]
    for d in (on, off):
        d["timing"]["step_composition"] = "fused" if fused else "sum"
    args = (b, 700.0, k, "ngram" if k and b else None, n, 0.0, None, 0.0, 0, 0, drafting)
    rows = b + (1 if n else 0)
    verifies = b > 0 and k > 0 and (drafting is None or drafting > 0)
    want = ROW_S * rows + ((SPEC_S + SPEC_ROW_S * rows) if verifies else 0.0)
    assert timer(on).price(*args) - timer(off).price(*args) == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_host_rows_price_the_same_compiled() -> None:
    """The compiled timer adds timing.host_rows exactly as the Python one (bit for bit)."""
    from sim.model.timer_packing import pack

    py, comp = timer(terms_dict()), timer(terms_dict())
    packed = pack(comp, "ngram")
    assert packed is not None
    for b, k, n, drafting in [(1, 3, 0, -1), (32, 3, 0, -1), (128, 3, 512, 5), (7, 2, 0, 0), (0, 0, 300, -1), (9, 0, 0, -1)]:
        want = py.price(b, 800.0, k, "ngram" if k else None, n, 0.0, None, 0.0, 0, 0, None if drafting < 0 else drafting)
        assert pk.price(packed.arrays, (b, 800.0, k, n, 0.0, 800.0, 0, 0, drafting)) == want


@pytest.mark.parametrize(("key", "value", "why"), [("seconds_per_row", -1e-6, ">= 0"), ("spec_seconds", "x", "number"),
                                                   ("provenance", None, "")])
def test_bad_host_rows_are_one_line_errors(key: str, value, why: str) -> None:
    d = terms_dict()
    if value is None:
        del d["timing"]["host_rows"][key]
    else:
        d["timing"]["host_rows"][key] = value
    with pytest.raises(SpecplanError, match=rf"timing\.host_rows.*{why}"):
        Profile.from_dict(d, "x")


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 300), k=st.integers(0, 3), c=st.integers(0, 8192))
def test_spec_step_is_non_decreasing_in_batch_and_k(b: int, k: int, c: int) -> None:
    for t in (timer(terms_dict()), timer(terms_dict(flat_dense=True))):
        here = decode(t, b, k, float(c))
        assert decode(t, b + 1, k, float(c)) >= here
        assert decode(t, b, k + 1, float(c)) >= here


@settings(max_examples=200, deadline=None)
@given(b=st.integers(1, 300), k=st.integers(1, 3), c=st.integers(0, 8192))
def test_an_extra_verified_token_costs_at_least_its_per_token_terms(b: int, k: int, c: int) -> None:
    """Going from k-1 to k drafts adds b verified tokens: at least b × sampling, plus the
    drafter's own growth; with every pass part flat, nothing else can pay for them."""
    t = timer(terms_dict(flat_dense=True))
    draft, host = t._draft["ngram"], t._overhead["ngram"]
    grow_d = (draft(b, k, c) - (draft(b, k - 1, c) if k > 1 else 0.0)
              + host(b, k) - (host(b, k - 1) if k > 1 else 0.0))
    assert decode(t, b, k, float(c)) - decode(t, b, k - 1, float(c)) >= b * SAMPLE_S + grow_d - 1e-15


SHIPPED = sorted(p.name for p in (REPO / "profiles").glob("*-vllm.json"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_gpu_profiles_price_spec_steps_monotone_in_batch_and_k(name: str) -> None:
    prof = load_profile(REPO / "profiles" / name)
    t = ProfileStepTimer(prof)
    proposer = next(iter(prof.timing.proposers))
    for c in (128.0, 1024.0, 8192.0):
        for k in range(0, 5):
            prev = 0.0
            for b in (1, 2, 3, 4, 8, 16, 31, 32, 33, 64, 100, 128, 256, 511, 512, 1024):
                v = t.price(b, c, k, proposer if k else None, 0, 0.0, None, 0.0, 0, 0, None)
                assert v >= prev, (name, b, k, c)
                if k:
                    assert v >= t.price(b, c, k - 1, proposer if k > 1 else None, 0, 0.0, None, 0.0, 0, 0, None)
                prev = v


@pytest.mark.parametrize(("sizes", "why"), [([], "non-empty"), ([4, 2], "strictly increasing"), ([0, 8], "integers >= 1")])
def test_bad_capture_sizes_are_one_line_errors(sizes: list, why: str) -> None:
    d = terms_dict()
    d["timing"]["cuda_graphs"]["capture_sizes"] = sizes
    with pytest.raises(SpecplanError, match=rf"timing\.cuda_graphs\.capture_sizes: .*{why}"):
        Profile.from_dict(d, "x")


def test_bench_prints_each_terms_source() -> None:
    """bench/specdecode_bench_targets.py names the publication and every term's provenance."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "specdecode_bench_targets.py")],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "arXiv 2601.11580" in text
    for part, src in (("dense ops", "imported"), ("sampling", "estimated"), ("draft host H", "assumed"),
                      ("per-step host overhead", "assumed"), ("host, scheduler update", "published"),
                      ("host, verified tokens to lists", "published")):
        assert part in text and f"[{src}" in text
    for line in (ln for ln in text.splitlines() if "[profile] step" in ln and "k=3, context" in ln):
        assert line.count("ms [") >= 6, line
    # beside each, the paper's own published fit term by term, and S/T at batch 1 and 32
    fit = [ln for ln in text.splitlines() if ln.strip().startswith("[published fit] step")]
    assert len(fit) == 6 and all(ln.count("ms [published]") >= 4 for ln in fit), fit
    for who in ("profile", "published fit"):
        assert f"[{who}] S/T from batch 1 to 32" in text


def _bench():
    return bench_module("specdecode_bench_targets")


@settings(max_examples=60, deadline=None)
@given(b=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]), k=st.sampled_from([0, 1, 3, 5]),
       c=st.sampled_from([128, 512, 1024, 4096]))
def test_the_published_step_diagnostic_prices_a_step_as_the_papers_fit(tmp_path_factory, b: int, k: int, c: int) -> None:
    """The bench's "every part published" row must price a decode step exactly as
    SpecDecode-Bench's predictor.py does, term by term (else the diagnostic says nothing)."""
    bench = _bench()
    out = tmp_path_factory.mktemp("pub") / "p.json"
    prof = load_profile(bench.published_step(REPO / "profiles" / "llama-3.1-8b-h100-vllm.json", out))
    assert prof.timing.provenance.method == "published"
    t = ProfileStepTimer(prof)
    want = sum(s for _, s, _ in bench.published_fit_terms(b, k, c))
    got = t.price(b, float(c), k, "eagle" if k else None, 0, 0.0, None, 0.0, 0, 0, None)
    assert got == pytest.approx(want, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(s1=st.floats(5e-3, 20e-3), t1=st.floats(4e-3, 10e-3), s32=st.floats(6e-3, 30e-3), t32=st.floats(5e-3, 15e-3),
       change=st.floats(-0.2, 0.2))
def test_the_benchs_per_request_gap_gives_back_the_speedup_change_it_was_asked_for(s1, t1, s32, t32, change) -> None:
    """bench's equivalence: x per request on every spec step turns S/T(1) ÷ S/T(32) into 1 + change."""
    x = _bench().gap_per_request(s1, t1, s32, t32, change)
    assert ((s1 + x) / t1) / ((s32 + 32 * x) / t32) == pytest.approx(1 + change, rel=1e-9)

"""A MoE import's verify pays for the distinct experts its tokens touch (the MoE form of rule 1 in
sim/contracts/timing_sanity.py, applied by the import's repair), for every MoE family the
kernel database has; and the repair's algebra on MoE grids."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from sim.contracts.errors import SpecplanError
from sim.contracts.expert_traffic import ExpertTraffic
from sim.contracts.profile import Profile
from sim.contracts.profile_timing import TimingGrid
from sim.contracts.timing_sanity import Floor, expert_reads, profile_experts, repair

AXES = (("batch", (1, 2, 4, 8)), ("tokens_per_seq", (1, 2, 3, 4, 5)), ("context", (128, 1024)))


def _floor(bw: float) -> Floor:
    return Floor(1e9, 0.0, bw, 1e9, "t", ExpertTraffic(128, 4, 36, 13e6))


def _reads(fl: Floor) -> np.ndarray:
    """Routed-expert read seconds per cell, from the traffic directly (b*s tokens routed)."""
    b, s = np.meshgrid(AXES[0][1], AXES[1][1], indexing="ij")
    return np.repeat((fl.experts.bytes(b * s) / fl.bandwidth)[..., None], len(AXES[2][1]), axis=2)


def _grid(vals: np.ndarray) -> TimingGrid:
    return TimingGrid("timing.target_forward", tuple(n for n, _ in AXES), tuple(a for _, a in AXES), vals)


@settings(max_examples=60)
@given(arrays(np.float64, (4, 5, 2), elements=st.floats(1e-4, 0.05)), st.floats(1e11, 1e13))
def test_the_repair_charges_every_extra_expert_over_every_smaller_pass_and_never_lowers(vals, bw) -> None:
    fl = _floor(bw)
    g = _grid(vals)
    out = repair(g, "target_forward", fl)
    reads = _reads(fl)
    assert np.allclose(np.asarray(expert_reads("target_forward", g, fl)), reads)
    assert (out >= vals - 1e-15).all()
    # along tokens per row (verify vs decode) and along batch: more tokens cost at least fewer + extra reads
    assert (np.diff(out - reads, axis=1) >= -1e-12).all() and (np.diff(out - reads, axis=0) >= -1e-12).all()
    assert np.allclose(repair(_grid(out), "target_forward", fl), out)  # idempotent


@given(st.floats(0.0, 0.01), st.floats(1e11, 1e13))
def test_a_grid_that_already_pays_for_its_experts_is_kept_as_is(base, bw) -> None:
    fl = _floor(bw)
    reads = _reads(fl)
    vals = fl.seconds(np.ones((4, 5, 2)), np.zeros((4, 5, 2))) + base + 1.5 * reads  # above the floor, grows faster
    assert np.allclose(repair(_grid(vals), "target_forward", fl), vals, rtol=0, atol=1e-15)


pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

from profiler.imported import aic_database as db  # noqa: E402
from profiler.imported.aiconfigurator_import import ImportRequest, build_profile  # noqa: E402


def _verify_pays_for_its_experts(d: dict) -> None:
    """At batch 1, V(k) >= T + (routed bytes(k+1) - routed bytes(1)) / bandwidth, every k and context."""
    p = Profile.from_dict(json.loads(json.dumps(d)), "import")
    ex = profile_experts(p)
    assert ex is not None
    dev = p.timing.provenance.device
    bw = dev.memory_bandwidth * dev.count
    g = p.timing.target_forward
    assert g.axis_names == ("batch", "tokens_per_seq", "context") and g.axes[0][0] == 1
    t = g.median[0]  # batch 1: [tokens_per_seq, context]
    for j, s in enumerate(g.axes[1]):
        need = t[0] + (ex.bytes(s) - ex.bytes(1)) / bw
        assert (t[j] >= need * (1 - 1e-9)).all(), (p.target.id, s, t[j][0], need[0])


def test_deepseek_v3_on_8_h200_verify_pays_for_the_experts_its_tokens_touch() -> None:
    """The database's MoE op is flat from 1 to 4 tokens here (7.33 -> 7.24 ms); a 4-token verify
    must still read about 30 experts per layer where a decode reads 8."""
    d = build_profile(ImportRequest("h200_sxm", "vllm", "deepseek-ai/DeepSeek-V3", tp=8, command="t"))
    _verify_pays_for_its_experts(d)
    notes = d["timing"]["provenance"]["notes"]
    assert "routed experts by distinct experts touched" in notes and "non-monotone in tokens_per_seq" in notes


def _moe_families() -> dict[str, str]:
    out: dict[str, str] = {}
    for model in db.cached_models():
        cfg = db.model_config(model)
        if db.num_experts(cfg):
            out.setdefault(str(cfg.get("model_type") or cfg.get("architectures")), model)
    return out


@pytest.mark.slow
def test_every_moe_family_in_the_database_verifies_no_cheaper_than_decode_plus_its_extra_experts() -> None:
    """One target-only import per MoE family on b200_sxm at the smallest TP that fits."""
    fams = _moe_families()
    assert len(fams) >= 5
    checked = []
    for fam, model in sorted(fams.items()):
        for tp in (1, 2, 4, 8):
            try:
                d = build_profile(ImportRequest("b200_sxm", "vllm", model, tp=tp, command="t"))
            except SpecplanError:
                continue
            _verify_pays_for_its_experts(d)
            checked.append(fam)
            break
    assert len(checked) >= 5, (checked, sorted(fams))

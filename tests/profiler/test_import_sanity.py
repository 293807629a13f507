"""The step-time rules at import (profiler/imported/import_sanity.py): the DeepSeek-V3 case of issue 37,
and one import per model family the kernel database has (skipped without the gpu-data extra)."""

from __future__ import annotations

import json

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.timing_sanity import check

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

from profiler.imported import aic_database as db  # noqa: E402
from profiler.imported.aiconfigurator_import import ImportRequest, build_profile  # noqa: E402


def _loaded(d: dict) -> Profile:
    return Profile.from_dict(json.loads(json.dumps(d)), "import")


def test_deepseek_v3_on_8_b200_imports_monotone_with_the_repair_in_its_provenance() -> None:
    """The database priced batch 4 at 25.9 ms against 37.3 ms at batch 1, and a 4-token verify
    below a 1-token decode; imported, every grid obeys the rules and the notes say what moved."""
    d = build_profile(ImportRequest("b200_sxm", "vllm", "deepseek-ai/DeepSeek-V3", ("mtp",), tp=8, ep=8, command="t"))
    p = _loaded(d)
    assert check(p, 0.0, 0.0).findings == ()
    tf = p.timing.target_forward.median
    assert (tf[1:, 0, :] >= tf[:-1, 0, :]).all() and (tf[:, 1:, :] >= tf[:, :-1, :]).all()
    notes = p.timing.provenance.notes or ""
    assert "timing sanity" in notes and "timing.target_forward: " in notes and "non-monotone in batch" in notes
    assert p.timing.provenance.device.memory_bandwidth == pytest.approx(8e12)
    assert p.timing_sanity.floor is not None and p.timing_sanity.findings == ()
    (line,) = p.timing_flags
    assert line.startswith("timing: ") and "timing.target_forward" in line and "timing.proposers.mtp.draft" in line


def _families() -> dict[str, str]:
    """model_type -> the first model id of that type the package ships a config for."""
    out: dict[str, str] = {}
    for model in db.cached_models():
        cfg = db.model_config(model)
        out.setdefault(str(cfg.get("model_type") or cfg.get("architectures")), model)
    return out


@pytest.mark.slow
def test_every_model_family_in_the_database_imports_sane_or_is_refused_in_one_line() -> None:
    """One target-only import per family on b200_sxm (FP4, 180 GB: the widest coverage), at the
    smallest tensor-parallel size that fits; the grids that come out obey every rule exactly."""
    fams = _families()
    assert len(fams) >= 10
    imported, refused = [], {}
    for fam, model in sorted(fams.items()):
        last: SpecplanError | None = None
        for tp in (1, 2, 4, 8):
            try:
                d = build_profile(ImportRequest("b200_sxm", "vllm", model, tp=tp, command="t"))
            except SpecplanError as exc:
                last = exc
                continue
            p = _loaded(d)
            assert check(p, 0.0, 0.0).findings == (), (fam, model, check(p, 0.0, 0.0).notes())
            assert "timing sanity" in (p.timing.provenance.notes or "") and p.timing_sanity.floor is not None
            imported.append(fam)
            break
        else:
            assert last is not None and "\n" not in str(last), (fam, model, str(last))
            refused[fam] = str(last)
    assert len(imported) >= 5, refused

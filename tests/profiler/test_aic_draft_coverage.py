"""Every (model family x draft kind) pair the kernel database lists imports, or says in one line why.

The families are the package's own (``ARCHITECTURE_TO_MODEL_FAMILY`` over the model configs it
ships), the draft kinds specplan's ``--draft`` keywords; nothing here is a hand list. Each family
is represented by its first model (sorted ids) whose target imports on 8x h200_sxm (experts
EP=8), or by its first model when none does. The axes are cut to a few points (the importer's
module-level grids, monkeypatched) so the whole cross product runs in the unit suite: every code
path of a full import runs, at ~0.1-2 s per pair instead of 5-17 s.
"""

from __future__ import annotations

import json

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

from aiconfigurator_core.sdk import common  # noqa: E402

import profiler.imported.aiconfigurator_import as ai  # noqa: E402
from profiler.imported import aic_database as db  # noqa: E402
from profiler.imported.aic_proposers import KEYWORDS  # noqa: E402

SYSTEM, TP = "h200_sxm", 8
DRAFT_KINDS = tuple(k for k in KEYWORDS if k != "none")
TINY = {"BATCH": [1, 8], "CONTEXT": [1024], "PREFILL_TOKENS": [128], "PREFILL_CONTEXT": [0],
        "DENSE_TOKENS": [1, 8], "K_MAX": 2}


@pytest.fixture(scope="module")
def tiny_axes():
    mp = pytest.MonkeyPatch()
    for name, value in TINY.items():
        mp.setattr(ai, name, value)
    yield
    mp.undo()


def _families() -> dict[str, list[str]]:
    fams: dict[str, list[str]] = {}
    for model in sorted(common.DefaultHFModels):
        arch = (db.model_config(model).get("architectures") or ["?"])[0]
        fams.setdefault(common.ARCHITECTURE_TO_MODEL_FAMILY.get(arch, arch), []).append(model)
    return fams


FAMILIES = _families()


def _request(model: str, drafts: tuple[str, ...] = ()) -> ai.ImportRequest:
    ep = TP if db.num_experts(db.model_config(model)) else 1
    return ai.ImportRequest(SYSTEM, "vllm", model, drafts, tp=TP, ep=ep, command="test")


def _import(model: str, drafts: tuple[str, ...] = ()) -> dict | str:
    """The profile, or the one-line reason (a traceback fails the test)."""
    try:
        return ai.build_profile(_request(model, drafts))
    except SpecplanError as exc:
        return str(exc)


@pytest.fixture(scope="module")
def representatives(tiny_axes) -> dict[str, str]:
    out = {}
    for fam, models in FAMILIES.items():
        out[fam] = next((m for m in models if isinstance(_import(m), dict)), models[0])
    return out


def test_the_database_lists_families_and_most_have_an_importable_model(representatives) -> None:
    assert len(FAMILIES) >= 10 and {"LLAMA", "DEEPSEEK", "MOE"} <= set(FAMILIES)
    importable = [f for f, m in representatives.items() if isinstance(_import(m), dict)]
    assert {"LLAMA", "DEEPSEEK", "DEEPSEEKV32", "MOE", "KIMIK25"} <= set(importable)


@pytest.mark.parametrize("kind", DRAFT_KINDS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_and_draft_kind_imports_or_gives_one_line_with_a_fix_that_works(
        representatives, family, kind) -> None:
    model = representatives[family]
    got = _import(model, (kind,))
    if isinstance(got, dict):
        p = Profile.from_dict(json.loads(json.dumps(got)), f"{family}-{kind}")
        assert kind in p.proposers and p.timing.proposers[kind].draft is not None
        if kind in ("eagle", "eagle3", "mtp"):
            assert float(p.timing.proposers[kind].draft.median.max()) > 0
        return
    assert "\n" not in got and "Traceback" not in got and "/tmp" not in got and "tmp" not in got.split()
    assert len(got) < 500
    target_alone = _import(model)
    if isinstance(target_alone, str):  # the target itself is refused: its reason, or the draft's own refusal
        assert got == target_alone or got.startswith(f"--draft {kind}: ")
        return
    # the draft is refused: the line names it and drafts that do import for this target
    assert got.startswith(f"--draft {kind}: ") and "valid for" in got
    for fix in _suggested_drafts(got):
        assert isinstance(_import(model, (fix,)), dict), f"suggested fix --draft {fix} fails for {model}"


def _suggested_drafts(line: str) -> list[str]:
    """The --draft keywords a refusal offers as valid (a draft model id and none are not keywords)."""
    tail = line.split("valid for", 1)[1].split(":", 1)[1]
    words = tail.replace("--draft", "").replace(" or ", ", ").split(";")[0].rstrip(")").split(",")
    return [w.strip() for w in words if w.strip() in DRAFT_KINDS]


def test_a_refusal_offers_the_keywords_it_names() -> None:
    line = ("--draft eagle: x's eagle head (one Llama decoder layer) cannot be priced on h200_sxm/vllm 0.24.0 tp=8: "
            "its attention kernels (valid for this target: --draft mtp, ngram, suffix or a draft model id; or "
            "another --system / --backend-version)")
    assert _suggested_drafts(line) == ["mtp", "ngram", "suffix"]
    assert _suggested_drafts("--draft mtp: y has no MTP (valid for it: eagle, eagle3, ngram, suffix, a draft "
                             "model id, none)") == ["eagle", "eagle3", "ngram", "suffix"]

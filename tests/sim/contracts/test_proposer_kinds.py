"""Proposer kinds by vLLM's method names, and a speculative_config that names a real model."""

from __future__ import annotations

import dataclasses

import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile, load_profile
from sim.contracts.profile_identity import PROPOSER_KINDS
from sim.contracts.synthetic import synthetic_profile, synthetic_profile_dict
from sim.decisions.policy_advice import advise_policy

MODEL = {"id": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "source": "hf", "path": None, "sha256": None,
         "architecture": synthetic_profile_dict()["target"]["architecture"]}


def test_kinds_are_vllms_method_names() -> None:
    assert set(PROPOSER_KINDS) == {"draft_model", "eagle", "eagle3", "medusa", "mtp", "ngram", "suffix", "self_draft"}


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "draft_model"])
def test_model_proposers_load_with_their_checkpoint(kind) -> None:
    d = synthetic_profile_dict()
    d["proposers"]["ngram"] = {"kind": kind, "model": MODEL}
    p = Profile.from_dict(d, "p")
    assert p.proposers["ngram"].kind == kind and p.proposers["ngram"].model.id == MODEL["id"]


def test_mtp_and_suffix_need_no_model_and_unknown_kinds_fail() -> None:
    d = synthetic_profile_dict()
    d["proposers"]["ngram"] = {"kind": "mtp"}
    assert Profile.from_dict(d, "p").proposers["ngram"].model is None
    d["proposers"]["ngram"] = {"kind": "suffix"}
    assert Profile.from_dict(d, "p").proposers["ngram"].kind == "suffix"
    d["proposers"]["ngram"] = {"kind": "medusa2"}
    with pytest.raises(SpecplanError, match=r"proposers\.ngram\.kind"):
        Profile.from_dict(d, "p")


def _advice(kind: str, identity):
    adv = advise_policy(synthetic_profile(), "ngram", batches=range(1, 9))
    return dataclasses.replace(adv, proposer_kind=kind, proposer_identity=identity, fixed_k=3)


def test_snippet_never_names_a_config_only_architecture_as_a_model() -> None:
    """Issue 21: the snippet said "model": "llama-3.2-1b-shaped", which vLLM cannot load."""
    shaped = load_profile("profiles/llama-3.1-8b-h100-estimate.json").proposers["llama-3.2-1b-shaped"]
    adv = _advice("draft_model", shaped)
    cfg = adv.vllm_speculative_config()
    assert cfg["method"] == "draft_model"
    assert cfg["model"].startswith("<FILL IN") and "llama-3.2-1b-shaped" in cfg["model"]
    assert "replace the <FILL IN ...> value" in adv.vllm_snippet()


def test_snippet_names_the_real_checkpoint_for_eagle3() -> None:
    d = synthetic_profile_dict()
    d["proposers"]["ngram"] = {"kind": "eagle3", "model": MODEL}
    ident = Profile.from_dict(d, "p").proposers["ngram"]
    cfg = _advice("eagle3", ident).vllm_speculative_config()
    key = "num_speculative_tokens_per_batch_size"  # the cut-off, where the advice has one
    assert cfg == {"method": "eagle3", "model": MODEL["id"], "num_speculative_tokens": 3} | (
        {key: cfg[key]} if key in cfg else {})
    mtp = _advice("mtp", None).vllm_speculative_config()
    assert mtp["method"] == "mtp" and "model" not in mtp

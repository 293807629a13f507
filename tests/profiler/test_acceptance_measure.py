"""measure_acceptance writes a valid profile acceptance entry from real speculative runs."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from profiler.measured_acceptance.acceptance import check_entry, measure_acceptance  # noqa: E402
from profiler.measured_acceptance.acceptance_report import (  # noqa: E402
    describe,
    mean_acceptance_length,
    precision_summary,
)
from profiler.passes.proposers import DraftModelProposer, NgramProposer  # noqa: E402
from profiler.prompt_sets import Prompt, builtin_prompts  # noqa: E402
from sim.contracts.errors import SpecplanError  # noqa: E402
from tests.helpers import tiny_llama  # noqa: E402

VOCAB = 64


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class CharTokenizer:
    """Characters to ids modulo the tiny vocabulary; id 0 is EOS."""

    chat_template = None
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1 + ord(c) % (VOCAB - 1) for c in text]}


def tiny_target(seed: int = 0) -> SimpleNamespace:
    model = tiny_llama(seed, vocab=VOCAB, layers=2)
    identity = {"id": "tiny-random", "source": "local", "path": "tiny", "sha256": "0" * 64}
    return SimpleNamespace(model=model, tokenizer=CharTokenizer(), identity=identity)


PROMPTS = [
    Prompt("s1", "summarization", "en", "the cat sat on the mat. the cat sat on the mat."),
    Prompt("s2", "summarization", "en", "a b c d a b c d a b c d"),
    Prompt("s3", "summarization", "en", "never measured: beyond prompts_per_segment"),
    Prompt("c1", "code", "sv", "def f(x): return x + 1\ndef g(x): return x + 1"),
]
PROV = {"method": "measured", "device": {"kind": "cpu"}, "notes": "threads=1"}


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def ngram_entry(target):
    return measure_acceptance(
        target, NgramProposer(1, 3), PROMPTS, k_max=3, temperatures=(0.0, 0.8),
        max_new_tokens=12, prompts_per_segment=2, seed=5, provenance=PROV,
    )


def test_entry_shape_and_invariants(ngram_entry):
    entry = ngram_entry
    check_entry(entry)
    assert entry["k_max"] == 3
    keys = [tuple(s["segment"].values()) for s in entry["segments"]]
    assert keys == [
        ("summarization", "en", 0.0), ("code", "sv", 0.0),
        ("summarization", "en", 0.8), ("code", "sv", 0.8),
    ]
    for seg in entry["segments"]:
        rows = seg["per_request"]
        assert len(rows) == (2 if seg["segment"]["task"] == "summarization" else 1)
        assert seg["num_drafts"] == sum(r["num_drafts"] for r in rows) > 0
        assert seg["num_draft_tokens"] == seg["num_drafts"] * 3
        assert seg["accepted_per_pos"] == [
            sum(r["accepted_per_pos"][i] for r in rows) for i in range(3)
        ]
        assert seg["num_accepted_tokens"] == sum(seg["accepted_per_pos"])
        # each request generated 12 tokens: drafts ≤ 12 and committed tokens cover them
        for r in rows:
            assert 1 <= r["num_drafts"] <= 12
            assert r["num_drafts"] + sum(r["accepted_per_pos"]) >= 12 or r["num_drafts"] < 12


def test_simulator_reads_the_measured_entry(target):
    from sim.contracts.profile import Profile
    from sim.contracts.synthetic import synthetic_profile_dict

    entry = measure_acceptance(
        target, NgramProposer(1, 3), PROMPTS, k_max=3, temperatures=(0.0,), max_new_tokens=8,
        prompts_per_segment=1, seed=0,  # default provenance: this machine, now
    )
    d = synthetic_profile_dict()
    d["target"] = {**d["target"], "source": "local", "path": "tiny", "sha256": "0" * 64}
    d["acceptance"]["ngram"] = entry
    profile = Profile.from_dict(d, "measured.json")
    assert any(line.startswith("acceptance[ngram]: measured") for line in profile.sources())


def test_provenance_is_kept_and_annotated(ngram_entry):
    prov = ngram_entry["provenance"]
    assert prov["method"] == "measured" and prov["device"] == {"kind": "cpu"}
    assert prov["notes"].startswith("threads=1; acceptance:")
    assert "count as rejected" in prov["notes"] and "vLLM" in prov["notes"]
    assert PROV["notes"] == "threads=1"  # caller's dict untouched


def test_same_seed_same_entry(target, ngram_entry):
    again = measure_acceptance(
        target, NgramProposer(1, 3), PROMPTS, k_max=3, temperatures=(0.0, 0.8),
        max_new_tokens=12, prompts_per_segment=2, seed=5, provenance=PROV,
    )
    assert again == ngram_entry


def test_identical_draft_is_accepted_everywhere(target):
    entry = measure_acceptance(
        target, DraftModelProposer(target.model, name="same"), PROMPTS[:2], k_max=4,
        temperatures=(0.0, 1.0), max_new_tokens=15, seed=1, provenance=PROV,
    )
    for seg in entry["segments"]:
        assert seg["accepted_per_pos"] == [seg["num_drafts"]] * 4
        assert mean_acceptance_length(seg) == 5.0
        # 15 tokens in steps of 5 per prompt, two prompts (fewer if EOS comes early)
        assert 2 <= seg["num_drafts"] <= 2 * 3
    # every request accepts everything: no spread, so the bootstrap interval is zero wide
    assert "mean acceptance length 5.00 (95 % 5.00–5.00, bootstrap over prompts)" in describe(entry)[0]
    assert all(seg["uncertainty"]["prompts"] == 2 for seg in entry["segments"])


def test_progress_is_reported(target):
    seen = []
    measure_acceptance(
        target, NgramProposer(), PROMPTS[:1], k_max=2, temperatures=(0.0,),
        max_new_tokens=4, seed=0, provenance=PROV, progress=lambda d, t, label: seen.append((d, t)),
    )
    assert seen == [(1, 1)]


def test_default_provenance_names_machine_and_models(target):
    entry = measure_acceptance(
        target, NgramProposer(), PROMPTS[:1], k_max=2, temperatures=(0.0,), max_new_tokens=4,
    )
    prov = entry["provenance"]
    assert prov["method"] == "measured"
    assert prov["device"]["kind"] == "cpu"
    assert prov["models"]["ngram"] == "prompt lookup 2..4"
    assert prov["libraries"]["torch"] == torch.__version__


def test_random_weights_refused():
    t = tiny_target()
    t.identity = {**t.identity, "source": "config-only", "sha256": None}
    with pytest.raises(SpecplanError, match="config-only"):
        measure_acceptance(t, NgramProposer(), PROMPTS, max_new_tokens=4, provenance=PROV)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k_max": 0}, "k_max=0"),
        ({"max_new_tokens": 0}, "max_new_tokens=0"),
        ({"temperatures": ()}, "temperatures"),
        ({"temperatures": (0.0, 0.0)}, "distinct"),
        ({"temperatures": (-1.0,)}, "temperatures"),
        ({"prompts_per_segment": 0}, "prompts_per_segment=0"),
    ],
)
def test_bad_arguments(target, kwargs, message):
    with pytest.raises(SpecplanError, match=message):
        measure_acceptance(target, NgramProposer(), PROMPTS, provenance=PROV, **kwargs)


def test_prompt_longer_than_context_refused(target):
    long = Prompt("long", "code", "en", "x" * 600)
    with pytest.raises(SpecplanError, match="prompt long"):
        measure_acceptance(target, NgramProposer(), [long], max_new_tokens=4, provenance=PROV)


def _seg(**over):
    seg = {
        "segment": {"task": "t", "language": "en", "temperature": 0.0},
        "num_drafts": 10, "num_draft_tokens": 30, "num_accepted_tokens": 9,
        "accepted_per_pos": [5, 3, 1],
        "per_request": [{"num_drafts": 10, "accepted_per_pos": [5, 3, 1]}],
    }
    seg.update(over)
    return {"k_max": 3, "segments": [seg]}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_seg(accepted_per_pos=[5, 3]), "expected 3 counts"),
        (_seg(accepted_per_pos=[3, 5, 1], num_accepted_tokens=9), "non-increasing"),
        (_seg(accepted_per_pos=[11, 3, 1], num_accepted_tokens=15), "exceeds num_drafts"),
        (_seg(num_accepted_tokens=8), "sum\\(accepted_per_pos\\)=9"),
        (_seg(num_draft_tokens=29), "num_drafts·k_max=30"),
        (_seg(per_request=[{"num_drafts": 2, "accepted_per_pos": [1, 2, 0]}]), "per_request\\[0\\]"),
        ({"k_max": 3, "segments": []}, "at least one segment"),
    ],
)
def test_check_entry_table(entry, message):
    with pytest.raises(SpecplanError, match=message):
        check_entry(entry, "p.json: acceptance.x")


def test_check_entry_accepts_valid_and_does_not_mutate():
    entry = _seg()
    before = copy.deepcopy(entry)
    check_entry(entry)
    assert entry == before


# ------------------------------------------------------------------------------------------
# the real model: n-gram lookup on summaries must be accepted often (SmolLM2-135M-Instruct)


@pytest.mark.slow
def test_smollm2_ngram_summarization_acceptance_is_substantial():
    models = pytest.importorskip("profiler.passes.models")
    try:
        target = models.load_model("smollm2", device="cpu")
    except SpecplanError as exc:
        pytest.skip(f"SmolLM2 not available here: {exc}")
    prompts = builtin_prompts(["summarization"], ["en"])
    entry = measure_acceptance(
        target, NgramProposer(2, 4), prompts, k_max=5, temperatures=(0.0,),
        max_new_tokens=24, prompts_per_segment=2, seed=0, provenance=PROV,
    )
    seg = entry["segments"][0]
    # A summary copies phrases of its source: lookup hits give clearly more than one token
    # per target pass (measured 1.6-1.8 on this model; a broken verifier gives 1.0).
    assert mean_acceptance_length(seg) > 1.25, describe(entry)
    assert seg["accepted_per_pos"][-1] > 0


def _rows_segment(task: str, rows: list[tuple[int, list[int]]]) -> dict:
    return {"segment": {"task": task, "language": "en", "temperature": 0.0},
            "num_drafts": sum(d for d, _ in rows),
            "accepted_per_pos": [sum(a[i] for _, a in rows) for i in range(2)],
            "per_request": [{"num_drafts": d, "accepted_per_pos": a} for d, a in rows]}


def test_precision_summary_names_the_thinnest_and_least_certain_segment():
    steady = _rows_segment("code", [(10, [2, 1])] * 12)  # 12 identical requests: ± 0
    thin = _rows_segment("chat", [(10, [5, 4]), (10, [0, 0]), (10, [2, 0])])
    line = precision_summary({"segments": [steady, thin]})
    assert line.startswith("fewest requests in a segment 3 (under 10: raise --prompts-per-segment)")
    assert "(95%, chat/en/T=0)" in line
    assert precision_summary({"segments": [steady]}) == (
        "fewest requests in a segment 12; least certain mean acceptance length ± 0.00 (95%, code/en/T=0)")
    assert precision_summary({"segments": [{**steady, "per_request": []}]}) is None

"""The shipped published acceptance tables: cited, valid, the files the generator writes, and
the import's default for a (method, model family) they cover."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler.imported.aiconfigurator_import import ImportRequest, _acceptance
from profiler.imported.published_library import (
    TABLES,
    _segment,
    documents,
    entry,
    family_of,
    prefer_published,
    published_for,
)
from profiler.measured_acceptance.acceptance import check_entry
from profiler.measured_acceptance.acceptance_lengths import lengths_from_rates, round_trip_error
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict

FOLDER = Path(__file__).resolve().parents[2] / "profiles" / "acceptance"
SHIPPED = sorted(FOLDER.glob("*.json"))


def test_the_files_are_what_the_generator_writes() -> None:
    for fname, doc in documents().items():
        assert json.loads((FOLDER / fname).read_text()) == json.loads(json.dumps(doc)), fname


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_table_is_cited_and_its_rates_are_survival_rates(path) -> None:
    doc = json.loads(path.read_text())
    base = synthetic_profile_dict()
    base["proposers"].update(doc["proposers"])
    base["acceptance"].update(doc["acceptance"])
    profile = Profile.from_dict(base, str(path))  # the simulator's own checks
    for name, e in doc["acceptance"].items():
        check_entry(e, name)
        prov = e["provenance"]
        assert prov["method"] == "published" and len(prov["citation"]) > 40
        assert "nominal" in prov["notes"] and "spread across requests" in prov["notes"]
        for seg in profile.acceptance[name].segments:
            rates = [a / seg.num_drafts for a in seg.accepted_per_pos]
            assert all(0.0 <= r <= 1.0 for r in rates)
            assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


@pytest.mark.parametrize("table", [t for t in TABLES if "cite" in t], ids=lambda t: t["name"])
def test_inferencex_citations_name_file_commit_and_run(table) -> None:
    cite = entry(table)["provenance"]["citation"]
    for part in (table["cite"]["file"], table["cite"]["commit"], table["cite"]["run"], "SPEED-Bench", "coding"):
        assert part in cite


@pytest.mark.parametrize(("table", "mode"), [(t, s["mode"]) for t in TABLES for s in t["segments"] if "lengths" in s],
                         ids=lambda x: x if isinstance(x, str) else x["name"])
def test_the_entry_gives_back_the_published_lengths_or_says_how_far(table, mode) -> None:
    seg = next(s for s in table["segments"] if s["mode"] == mode)
    e = entry(table)
    got = next(s for s in e["segments"] if s["segment"]["task"] == seg["task"])
    rates = [a / got["num_drafts"] for a in got["accepted_per_pos"]]
    err = round_trip_error(seg["lengths"], rates)
    if err > 5e-3 + 1e-4:  # noisy table: the notes print the distance
        assert f"within {round_trip_error(seg['lengths'], _exact(table, mode)):.3f}" in e["provenance"]["notes"]
    else:  # consistent table: every printed length comes back to its 2 decimals
        back = lengths_from_rates(rates)
        assert [f"{al:.2f}" for al in back] == [f"{seg['lengths'][k]:.2f}" for k in sorted(seg["lengths"])]


def _exact(table, mode):
    from profiler.measured_acceptance.acceptance_lengths import rates_from_lengths

    return rates_from_lengths(next(s for s in table["segments"] if s["mode"] == mode)["lengths"])


def test_vllm_pr_24243_rates_are_as_printed() -> None:
    e = entry(next(t for t in TABLES if t["name"] == "vllm-pr24243-minicpm3-eagle3"))
    seg = e["segments"][0]
    assert [a / seg["num_drafts"] for a in seg["accepted_per_pos"]] == [0.58, 0.34, 0.22, 0.15, 0.11]
    assert "#24243" in e["provenance"]["citation"]


@given(k=st.integers(1, 8), frac=st.floats(0.0, 0.99))
def test_a_tau_at_k_becomes_geometric_survival_whose_mean_length_is_tau_exactly(k, frac) -> None:
    """A card's one number (tau at k) spread over k positions: the entry gives tau back to the
    nominal resolution, its rates are survival rates, and (shape assumed) one rate per token."""
    tau = round(1 + frac * k, 2)
    seg, how = _segment({"task": "chat", "temperature": 1.0, "mode": "card", "tau": (k, tau)})
    rates = [a / seg["num_drafts"] for a in seg["accepted_per_pos"]]
    assert len(rates) == k and seg["num_accepted_tokens"] == sum(seg["accepted_per_pos"])
    assert abs(1 + sum(rates) - tau) < 1e-9
    assert all(0.0 <= r <= 1.0 for r in rates) and all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    if rates[-1] * seg["num_drafts"] >= 100:  # resolved: each position's rate is alpha times the last
        alpha = float(how.split("alpha=")[1].split(":")[0])
        assert all(abs(b - alpha * a) < 2e-3 for a, b in zip(rates[1:], rates[2:], strict=False))
    assert "assumed" in how


def test_the_nebius_card_rows_are_as_printed_at_temperature_1_and_k_7() -> None:
    e = entry(next(t for t in TABLES if t["name"] == "nebius-card-llama-3.1-8b-eagle3"))
    got = {s["segment"]["task"]: (s["segment"]["temperature"], len(s["accepted_per_pos"]),
                                  1 + s["num_accepted_tokens"] / s["num_drafts"]) for s in e["segments"]}
    assert got == {"chat": (1.0, 7, 2.77), "code": (1.0, 7, 3.49), "math": (1.0, 7, 3.34)}
    for part in ("nebius/EAGLE3-Llama-3.3-70B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "K = 7", "temperature = 1"):
        assert part in e["provenance"]["citation"]
    assert published_for("eagle3", "meta-llama/Llama-3.1-8B")[0] == "vllm-ci-llama-3.1-8b-eagle3"  # not the default


@pytest.mark.parametrize(("model", "family"), [
    ("nvidia/DeepSeek-V4-Pro-NVFP4", "deepseek-v4-pro"), ("deepseek-ai/DeepSeek-V4-Pro", "deepseek-v4-pro"),
    ("moonshotai/Kimi-K2.5", "kimi-k2.5"), ("nvidia/MiniMax-M3-NVFP4", "minimax-m3"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"), ("meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Qwen/Qwen3-VL-30B-A3B-Instruct-FP8", "qwen3-vl-30b-a3b"),
])
def test_family_of_drops_organisation_weight_format_and_instruct(model, family) -> None:
    assert family_of(model) == family


def test_lookup_is_by_method_and_family_never_a_guess() -> None:
    assert published_for("mtp", "deepseek-ai/DeepSeek-V4-Pro")[0] == "inferencex-deepseek-v4-pro-mtp"
    assert published_for("eagle3", "nvidia/MiniMax-M3-NVFP4")[0] == "inferencex-minimax-m3-eagle3"
    assert published_for("eagle3", "meta-llama/Meta-Llama-3.1-8B")[0] == "vllm-ci-llama-3.1-8b-eagle3"
    assert published_for("eagle3", "deepseek-ai/DeepSeek-V4-Pro") is None  # the table is MTP's
    assert published_for("mtp", "deepseek-ai/DeepSeek-V3") is None  # another model of the maker
    assert published_for("eagle3", "meta-llama/Llama-3.1-70B") is None  # another size
    assert published_for("eagle3", "openai/gpt-oss-120b") is None  # the table is gpt-oss-20b's
    assert published_for("draft_model", "meta-llama/Llama-3.1-8B") is None


def _imported(target: str, rates: dict[str, list[float]]) -> dict:
    """A profile as import-aiconfigurator leaves it before the library is consulted."""
    kinds = {"eagle3": "eagle3", "ngram": "ngram", "mtp": "mtp"}
    req = ImportRequest("b200_sxm", "vllm", target, tuple(rates), command="cmd",
                        assumed_acceptance={k: tuple(v) for k, v in rates.items() if v})
    proposers = {n: {"kind": kinds[n]} for n in rates}
    return {"target": {"id": target}, "proposers": proposers, "acceptance": _acceptance(req, proposers)}


def test_published_wins_over_assumed_and_assumed_stays_the_last_resort() -> None:
    p = _imported("nvidia/Kimi-K2.5-NVFP4", {"eagle3": [0.75, 0.5625], "ngram": [0.5, 0.25]})
    said = prefer_published(p, "cmd")
    prov = p["acceptance"]["eagle3"]["provenance"]
    assert prov["method"] == "published" and "kimik2.5_eagle3.yaml" in prov["citation"]
    assert "replaces an assumed entry" in prov["notes"] and prov["command"] == "cmd"
    assert said == ["acceptance eagle3: published table inferencex-kimi-k2.5-eagle3 (replaces an assumed entry)"]
    assert p["acceptance"]["ngram"]["provenance"]["method"] == "assumed"  # no table for ngram


@pytest.mark.parametrize("method", ["measured", "imported", "published"])
def test_measured_and_published_entries_are_never_replaced(method) -> None:
    p = _imported("moonshotai/Kimi-K2.5", {"eagle3": [0.5]})
    p["acceptance"]["eagle3"]["provenance"]["method"] = method
    assert prefer_published(p, "cmd") == []
    assert p["acceptance"]["eagle3"]["provenance"]["method"] == method


def test_a_proposer_without_entry_gets_the_table_and_one_without_table_gets_nothing() -> None:
    p = _imported("deepseek-ai/DeepSeek-V4-Pro", {"mtp": []})
    assert prefer_published(p, None) == ["acceptance mtp: published table inferencex-deepseek-v4-pro-mtp (no entry before)"]
    q = _imported("meta-llama/Llama-3.1-70B", {"eagle3": []})
    assert prefer_published(q, None) == [] and q["acceptance"] == {}


def test_shipped_8b_profiles_carry_the_published_eagle3_entry() -> None:
    for name in ("llama-3.1-8b-h100-vllm.json", "llama-3.1-8b-h200-vllm.json"):
        doc = json.loads((FOLDER.parent / name).read_text())
        got = doc["acceptance"]["eagle3"]
        want = entry(next(t for t in TABLES if t["name"] == "vllm-ci-llama-3.1-8b-eagle3"))
        assert got["segments"] == want["segments"] and got["provenance"]["citation"] == want["provenance"]["citation"]
        assert {e["provenance"]["method"] for n, e in doc["acceptance"].items() if n != "eagle3"} == {"assumed"}


def test_the_real_import_takes_the_published_table(tmp_path) -> None:
    pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")
    from profiler.imported.aiconfigurator_import import build_profile

    p = build_profile(ImportRequest("h200_sxm", "vllm", "meta-llama/Llama-3.1-8B", ("eagle3",), command="t",
                                    assumed_acceptance={"eagle3": (0.75, 0.5625, 0.4219)}))
    assert p["acceptance"]["eagle3"]["provenance"]["method"] == "published"
    Profile.from_dict(json.loads(json.dumps(p)), "imported")

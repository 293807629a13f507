"""The shipped published acceptance entries reproduce their tables' numbers exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.imported.published_tables import TABLE, library
from profiler.measured_acceptance.acceptance import check_entry
from sim.contracts.profile import Profile
from sim.contracts.synthetic import synthetic_profile_dict

FILE = Path(__file__).resolve().parents[2] / "profiles" / "acceptance" / "spec-bench-vicuna-7b-a100.json"
DOC = json.loads(FILE.read_text())
# The numbers as printed in Spec-Bench's Leaderboard.md, "Leaderboard on A100", Vicuna-7B-v1.3,
# column "#Mean Accepted Tokens" (read from the repository's file, hemingkx/Spec-Bench).
PRINTED = {"spec-bench-eagle": "3.61", "spec-bench-medusa": "2.32", "spec-bench-pld": "1.73"}


def test_the_file_is_what_the_generator_writes() -> None:
    assert DOC == json.loads(json.dumps(library()))


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_entry_reproduces_the_table(name) -> None:
    entry = DOC["acceptance"][name]
    check_entry(entry, name)
    seg = entry["segments"][0]
    mean = 1 + seg["num_accepted_tokens"] / seg["num_drafts"]
    assert f"{mean:.2f}" == PRINTED[name]
    # exactly (integer counts), not just to the printed digits
    assert seg["num_accepted_tokens"] * 100 == (round(float(PRINTED[name]) * 100) - 100) * seg["num_drafts"]
    prov = entry["provenance"]
    assert prov["method"] == "published" and "Leaderboard.md" in prov["citation"]
    assert "Vicuna-7B-v1.3" in prov["citation"] and "A100" in prov["citation"]
    assert "assumed" in prov["notes"]  # mean-only: shape and spread are assumptions


def test_entries_load_into_a_profile() -> None:
    d = synthetic_profile_dict()
    d["proposers"].update(DOC["proposers"])
    d["acceptance"].update(DOC["acceptance"])
    p = Profile.from_dict(d, "merged")
    for row in TABLE:
        entry = p.acceptance[row["proposer"]]
        assert entry.provenance.method == "published"
        assert entry.segments[0].mean_acceptance_length == pytest.approx(row["mean_accepted_tokens"])

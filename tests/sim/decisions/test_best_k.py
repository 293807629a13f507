"""Best k per load against the synthetic profile's closed-form step times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.contracts.synthetic import synthetic_profile
from sim.decisions.best_k import best_k_table

REPO = Path(__file__).resolve().parents[3]
PARAMS = dict(base_step_s=0.010, per_seq_s=0.0001, per_token_s=0.001, per_context_token_s=1e-7,
              draft_base_s=0.0002, draft_per_token_s=0.00005, overhead_base_s=0.0003, overhead_per_seq_s=0.00002)


def closed_form(b: int, k: int, s, p: float, c: float = 512.0) -> float:
    fwd = PARAMS["base_step_s"] + PARAMS["per_seq_s"] * b + PARAMS["per_token_s"] * b * (1 + k * p) + PARAMS["per_context_token_s"] * b * c
    if k == 0:
        return fwd / b
    # Binomial(b, p) drafting rows, as the simulator draws them: the linear parts average to the
    # mean count b·p, the drafter's fixed parts are paid on the steps where some row drafts
    some = 1.0 - (1.0 - p) ** b
    step = (fwd + some * (PARAMS["draft_base_s"] + PARAMS["overhead_base_s"])
            + (PARAMS["draft_per_token_s"] * k + PARAMS["overhead_per_seq_s"]) * b * p)
    return step / (b * (1 + p * sum(s[:k])))


@pytest.mark.parametrize("p", [1.0, 0.15])
def test_best_k_matches_the_closed_form_including_k0(p) -> None:
    prof = synthetic_profile(proposal_rate=p, **PARAMS)
    seg = prof.acceptance["ngram"].segments[0]
    table = best_k_table(prof, "ngram", [1, 4, 16, 64])
    for cell in table:
        want = [closed_form(cell.batch, k, seg.survival, seg.proposal_rate) for k in range(6)]
        assert cell.per_k_s == pytest.approx(want, rel=1e-9)
        assert cell.best_k == min(range(6), key=lambda k: want[k])
    assert table[0].best_k > 0 and table[-1].best_k == 0  # pays at batch 1, not at 64


def test_cli_prints_the_table(tmp_path) -> None:
    import json

    from sim.contracts.synthetic import synthetic_profile_dict

    path = tmp_path / "p.json"
    path.write_text(json.dumps(synthetic_profile_dict(proposal_rate=0.15, **PARAMS)))
    r = subprocess.run([sys.executable, "-m", "cli", "breakeven", "--profile", str(path), "--proposer", "ngram",
                        "--best-k", "1,64"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "best k per load" in r.stdout and "chat:en:0" in r.stdout and "15%" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "cli", "breakeven", "--profile", str(path), "--proposer", "ngram",
                          "--best-k", "1,x"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--best-k" in bad.stderr


def test_breakeven_table_agrees_with_best_k_at_a_proposal_rate() -> None:
    from sim.decisions.breakeven import breakeven_from_profile

    prof = synthetic_profile(proposal_rate=0.15, **PARAMS)
    seg = prof.acceptance["ngram"].segments[0]
    for b in (1, 16):
        r = breakeven_from_profile(prof, "ngram", batch=b, context=512.0)
        cell = best_k_table(prof, "ngram", [b])[0]
        for row in r.rows:
            assert row.speedup == pytest.approx(cell.per_k_s[0] / cell.per_k_s[row.k], rel=1e-9)
        assert any("proposal on" in n for n in r.notes) and seg.proposal_rate < 0.2


def test_the_readme_best_k_example_runs_without_a_segment(capsys):
    """README: ``breakeven --profile … --proposer ngram --best-k 1,8,64`` lists every segment's best
    k (it used to exit 2 asking for --segment, which only the one-segment table needs)."""
    from pathlib import Path

    from cli.main import main

    prof = Path(__file__).resolve().parents[3] / "profiles" / "smollm2-135m-cpu.json"
    assert main(["breakeven", "--profile", str(prof), "--proposer", "ngram", "--best-k", "1,8,64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("best k per load") and "code:en:0 " in out and "b=64" in out

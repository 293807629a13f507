"""How often a policy turned speculation off: the share of decoding steps run with k = 0, and
the share of decoding time, in every summary row, the terminal table and the JSON."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from sim.results import metric_names as mn
from sim.results.spec_off import spec_off_shares
from tests.helpers import scenario_toml, segment, write_scenario

step = st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 0.5), st.integers(0, 4), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(step, max_size=40), t0=st.floats(0.0, 5.0), span=st.floats(0.01, 10.0))
def test_the_shares_match_a_readable_count_over_the_window(rows, t0, span):
    """A decoding step (decode batch > 0) counts once when any of it lies in the window, and
    for its time inside the window; prefill-only steps never count."""
    t1 = t0 + span
    steps = pl.DataFrame({"t_start_s": [r[0] for r in rows], "duration_s": [r[1] for r in rows],
                          "decode_seqs": [r[2] for r in rows], "k": [r[3] for r in rows]},
                         schema={"t_start_s": pl.Float64, "duration_s": pl.Float64, "decode_seqs": pl.Int64,
                                 "k": pl.Int64})
    inside = [(r, min(r[0] + r[1], t1) - max(r[0], t0)) for r in rows if r[2] > 0]
    inside = [(r, t) for r, t in inside if t > 0]
    got = spec_off_shares(steps, t0, t1)
    if not inside:
        assert got == (None, None)
        return
    off = [t for r, t in inside if r[3] == 0]
    assert got[0] == len(off) / len(inside)
    total = sum(t for _, t in inside)
    assert got[1] is not None and abs(got[1] - sum(off) / total) < 1e-9
    assert 0.0 <= got[0] <= 1.0 and 0.0 <= got[1] <= 1.0


def test_a_cut_off_policy_reports_its_off_share_and_fixed_k_and_baseline_do_not(tmp_path, capsys):
    """Under a load that keeps the decode batch above 1, ``off_above_batch`` with max_batch 1
    drafts only when one request decodes: its share is above zero; a fixed k never turns
    speculation off (0); the baseline never speculates (null, not 100 %)."""
    text = scenario_toml(
        "off", run={"duration_s": 30, "warmup_s": 3, "seeds": [1]},
        workload={"arrival": "poisson", "rate": 6.0}, segments=[segment(prompt=48, output=24)],
        fleet={"profile": "profile.json"},
        candidates=[{"name": "baseline", "speculation": "off"},
                    {"name": "fixed", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.7, 0.5]},
                    {"name": "cut", "proposer": "ngram", "k": 2, "assumed_acceptance": [0.7, 0.5],
                     "policy": "off_above_batch", "max_batch": 1}])
    path = write_scenario(tmp_path, text)
    assert main(["simulate", str(path), "--json", "--max-seeds", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r[mn.CANDIDATE]: r for r in doc["summary"] if r[mn.SEGMENT] == mn.ALL_SEGMENTS}
    assert rows["baseline"][mn.SPEC_OFF_STEPS] is None and rows["baseline"][mn.SPEC_OFF_TIME] is None
    assert rows["fixed"][mn.SPEC_OFF_STEPS] == 0.0 and rows["fixed"][mn.SPEC_OFF_TIME] == 0.0
    assert 0.0 < rows["cut"][mn.SPEC_OFF_STEPS] < 1.0 and 0.0 < rows["cut"][mn.SPEC_OFF_TIME] < 1.0
    assert main(["simulate", str(path), "--max-seeds", "1", "--quiet"]) == 0
    table = capsys.readouterr().out
    line = next(x for x in table.splitlines() if x.startswith("spec. off (% steps | % time)"))
    assert f"{100 * rows['cut'][mn.SPEC_OFF_STEPS]:.1f} | {100 * rows['cut'][mn.SPEC_OFF_TIME]:.1f}" in line

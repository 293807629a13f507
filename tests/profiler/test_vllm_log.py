"""Reading vLLM's ``SpecDecoding metrics:`` log lines (fixtures written with vLLM's own format)."""

from __future__ import annotations

import numpy as np
import pytest

from profiler.imported.vllm_log import entry_from_log, parse_line
from profiler.measured_acceptance.acceptance import check_entry
from sim.contracts.errors import SpecplanError

# vllm/v1/spec_decode/metrics.py SpecDecodingLogging.log, verbatim format string
FMT = ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
       "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
       "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%")


def vllm_line(drafts: int, per_pos: list[int], draft_tokens: int, elapsed: float = 10.0) -> str:
    """What vLLM logs for one interval, computed the way SpecDecodingLogging.log does."""
    accepted = sum(per_pos)
    rates = np.sum(np.array([per_pos]), axis=0) / drafts
    rates_str = ", ".join(f"{p:.3f}" for p in rates)
    msg = FMT % (1 + accepted / drafts, accepted / elapsed, draft_tokens / elapsed, accepted,
                 draft_tokens, rates_str, accepted / draft_tokens * 100)
    return f"INFO 12-01 14:03:21 [metrics.py:112] {msg}"


LOG = "\n".join([
    "INFO 12-01 14:03:01 [api_server.py:1024] Starting vLLM API server on http://0.0.0.0:8000",
    vllm_line(1873, [1502, 1141, 869], 5619),
    "INFO 12-01 14:03:21 [loggers.py:116] Engine 000: Avg prompt throughput: 812.3 tokens/s",
    vllm_line(2210, [1805, 1377, 1066], 6630),
])


def test_entry_from_a_log_sums_intervals_and_recovers_counts(tmp_path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(LOG, encoding="utf-8")
    entry = entry_from_log(str(path), task="chat", language="en")
    check_entry(entry)
    seg = entry["segments"][0]
    assert seg["num_drafts"] == 1873 + 2210
    assert seg["num_accepted_tokens"] == sum([1502, 1141, 869, 1805, 1377, 1066])
    # per-position counts from 3-decimal rates: within half a unit of the last decimal
    for got, want in zip(seg["accepted_per_pos"], [1502 + 1805, 1141 + 1377, 869 + 1066], strict=True):
        assert abs(got - want) <= 0.0005 * seg["num_drafts"] + 1
    assert "proposal rate unknown" in entry["provenance"]["notes"]
    assert entry["provenance"]["method"] == "imported"


def test_one_line_by_hand() -> None:
    iv = parse_line(vllm_line(1000, [800, 600, 400], 3000), "log", 7)
    assert (iv.num_drafts, iv.num_accepted_tokens, iv.accepted_per_pos) == (1000, 1800, (800, 600, 400))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("INFO SpecDecoding metrics: Mean acceptance length: 2.00", r"log:3: a 'SpecDecoding metrics:' line without"),
        (vllm_line(1000, [800, 600, 400], 3000).replace("0.800, 0.600", "0.600, 0.800"), r"log:3: .*non-increasing"),
        (vllm_line(1000, [800, 600, 400], 3000).replace("length: 2.80", "length: 2.10"), r"log:3: Mean acceptance length 2.1 disagrees"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, text, match) -> None:
    with pytest.raises(SpecplanError, match=match):
        parse_line(text, "log", 3)


def test_a_log_without_lines_says_so(tmp_path) -> None:
    path = tmp_path / "empty.log"
    path.write_text("INFO nothing here\n")
    with pytest.raises(SpecplanError, match="no 'SpecDecoding metrics:' lines"):
        entry_from_log(str(path))


def test_cli_import_vllm_log(tmp_path, capsys) -> None:
    from cli.main import main

    path = tmp_path / "vllm.log"
    path.write_text(LOG, encoding="utf-8")
    out = tmp_path / "acc.json"
    code = main(["profile", "import-vllm", "--log", str(path), "--proposer", "eagle3-head",
                 "--proposer-kind", "eagle3", "--segment", "chat:en:0", "-o", str(out)])
    assert code == 0
    import json

    doc = json.loads(out.read_text())
    assert doc["proposers"]["eagle3-head"] == {"kind": "eagle3"}
    assert doc["acceptance"]["eagle3-head"]["segments"][0]["num_drafts"] == 4083
    bad = main(["profile", "import-vllm", "--log", str(path), "--proposer", "x",
                "--proposer-kind", "medusa2", "--segment", "chat:en:0", "-o", str(tmp_path / "b.json")])
    assert bad == 2
    assert "--proposer-kind 'medusa2': expected one of draft_model, eagle, eagle3, medusa, mtp, ngram, suffix" in capsys.readouterr().err

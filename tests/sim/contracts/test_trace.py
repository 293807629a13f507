"""Azure-schema trace reading: exact offsets and lengths; every bad row names its CSV line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.contracts.errors import SpecplanError
from sim.contracts.trace import read_trace

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _csv(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(header + "".join(r + "\n" for r in rows), encoding="utf-8")
    return p


def test_reads_offsets_with_seven_fractional_digits(tmp_path: Path) -> None:
    p = _csv(
        tmp_path,
        [
            "2023-11-16 18:15:46.6805900,374,44",
            "2023-11-16 18:15:46.6805901,10,0",  # 100 ns later: 7th digit must survive
            "2023-11-16 18:15:50.9951690,396,109",
            "2023-11-16 18:16:00,5,7",  # no fraction at all
        ],
    )
    tr = read_trace(p)
    assert len(tr) == 4
    np.testing.assert_allclose(tr.offsets_s, [0.0, 1e-7, 4.314579, 13.31941], rtol=0, atol=1e-9)
    assert tr.prompt_tokens.tolist() == [374, 10, 396, 5]
    assert tr.output_tokens.tolist() == [44, 0, 109, 7]
    assert tr.prompt_tokens.dtype == np.int64 and tr.offsets_s.dtype == np.float64
    assert tr.start.year == 2023 and tr.start.second == 46
    assert tr.span_s == pytest.approx(13.31941)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 25:15:46.1,1,1"], "t.csv:3: TIMESTAMP '2023-11-16 25:15:46.1' is not a time; valid: YYYY-MM-DD HH:MM:SS"),
        (["yesterday,1,1"], "t.csv:2: TIMESTAMP 'yesterday' is not a time"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:47.1,-3,1"], "t.csv:3: ContextTokens '-3' is not a token count; valid: integers ≥ 0"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:47.1,4,2.5"], "t.csv:3: GeneratedTokens '2.5' is not a token count"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:47.1,4,"], "t.csv:3: GeneratedTokens '' is not a token count"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:45.0,1,1"], "t.csv:3: TIMESTAMP '2023-11-16 18:15:45.0' is earlier than the previous row's '2023-11-16 18:15:46.1'; valid: rows sorted by time"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:47.1,1"], "t.csv:3: expected 3 fields"),
        (["2023-11-16 18:15:46.1,1,1", "2023-11-16 18:15:47.1,1,1,9"], "t.csv:3: expected 3 fields"),
        ([], "t.csv:2: trace has a header but no rows"),
    ],
    ids=["bad-hour", "not-a-time", "negative", "fraction", "empty-field", "unsorted", "short-row", "long-row", "no-rows"],
)
def test_bad_rows_name_the_line(tmp_path: Path, rows: list[str], expected: str) -> None:
    with pytest.raises(SpecplanError) as info:
        read_trace(_csv(tmp_path, rows))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text(HEADER + "2023-11-16 18:15:46.1,1,1\n\n2023-11-16 18:15:47.1,x,1\n", encoding="utf-8")
    with pytest.raises(SpecplanError, match=r"t\.csv:4: ContextTokens 'x'"):
        read_trace(p)
    p.write_text(HEADER + "2023-11-16 18:15:46.1,1,1\n\n2023-11-16 18:15:40.1,2,1\n", encoding="utf-8")
    with pytest.raises(SpecplanError, match=r"t\.csv:4: TIMESTAMP"):
        read_trace(p)


@pytest.mark.parametrize(
    "header", ["timestamp,ContextTokens,GeneratedTokens\n", "TIMESTAMP,ContextTokens\n", "a,b,c\n"]
)
def test_bad_header(tmp_path: Path, header: str) -> None:
    with pytest.raises(SpecplanError, match=r"t\.csv:1: bad header .*valid: TIMESTAMP,ContextTokens,GeneratedTokens"):
        read_trace(_csv(tmp_path, ["2023-11-16 18:15:46.1,1,1"], header=header))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecplanError, match="trace file not found"):
        read_trace(tmp_path / "nope.csv")


@pytest.mark.skipif(not (TRACES / "azure_llm_2023_conv.csv").is_file(),
                    reason=f"public Azure traces not found at {TRACES}")
def test_real_azure_conv_trace() -> None:
    tr = read_trace(TRACES / "azure_llm_2023_conv.csv")
    # figures from the traces' README (19,366 rows over 3,502 s, 5.53 req/s)
    assert len(tr) == 19_366
    assert tr.span_s == pytest.approx(3501.72, abs=0.01)
    assert tr.mean_rate == pytest.approx(5.53, abs=0.01)
    assert float(np.median(tr.prompt_tokens)) == 1020.0
    assert float(np.median(tr.output_tokens)) == 129.0
    assert (np.diff(tr.offsets_s) >= 0).all()

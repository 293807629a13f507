"""Every trace format: a fixture written from its documented layout read exactly, the same rows
read alike in every format (a property), and each bad input refused in one line naming the
file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.contracts.errors import SpecplanError
from sim.contracts.trace import detect_format, read_trace
from sim.contracts.trace_config import TraceColumns, TraceConfig

FIXTURES = Path(__file__).resolve().parent / "traces"


def _write_text(folder: Path, text: str) -> Path:
    p = folder / "t.csv"
    p.write_text(text, encoding="utf-8")
    return p


def _config(name: str, **kw: object) -> TraceConfig:
    return TraceConfig(path=str(FIXTURES / name), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "fmt"), [
    ("azure_2023.csv", "azure"), ("azure_2024.csv", "azure"), ("mooncake.jsonl", "mooncake"),
    ("burstgpt.csv", "burstgpt"), ("vllm_bench.json", "vllm-bench"),
])
def test_formats_with_a_signature_are_detected(name: str, fmt: str) -> None:
    assert detect_format(FIXTURES / name) == fmt
    assert read_trace(FIXTURES / name).format == fmt


def test_azure_2023_and_2024(tmp_path: Path) -> None:
    old = read_trace(FIXTURES / "azure_2023.csv")
    np.testing.assert_allclose(old.offsets_s, [0.0, 0.3, 1.5, 4.0], atol=1e-9)
    assert old.prompt_tokens.tolist() == [374, 120, 1020, 4142]
    assert old.output_tokens.tolist() == [44, 8, 129, 601]
    new = read_trace(FIXTURES / "azure_2024.csv")
    # the third row is written at +02:00: 02:00:01 there is 00:00:01 UTC
    np.testing.assert_allclose(new.offsets_s, [0.0, 0.5, 1.0], atol=1e-9)
    assert new.start is not None and new.start.year == 2024 and new.hash_ids is None
    assert str(new.start) == "2024-05-10 00:00:00.009930"
    offset = read_trace(_write_text(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                               "2024-05-10 02:00:00.5+02:00,1,1\n"))
    assert str(offset.start) == "2024-05-10 00:00:00.500000"  # as UTC


def test_mooncake_keeps_hash_ids_per_row() -> None:
    tr = read_trace(_config("mooncake.jsonl", format="mooncake"))
    np.testing.assert_allclose(tr.offsets_s, [0.0, 27.482, 30.535])
    assert tr.prompt_tokens.tolist() == [6755, 6955, 1000]
    assert tr.output_tokens.tolist() == [500, 52, 24]
    assert tr.hash_ids_of(0).tolist() == list(range(14))
    assert tr.hash_ids_of(1).tolist() == [*range(13), 46]  # 13 blocks shared with row 0
    assert tr.hash_ids_of(2).tolist() == [47, 48]
    assert tr.hash_block_tokens == 512


def test_burstgpt_failed_rows_are_counted_and_left_out() -> None:
    tr = read_trace(FIXTURES / "burstgpt.csv")
    np.testing.assert_allclose(tr.offsets_s, [0.0, 113.0, 155.5])  # origin: the file's first row
    assert tr.prompt_tokens.tolist() == [472, 417, 170]
    assert tr.output_tokens.tolist() == [18, 217, 45]
    (note,) = tr.notes
    assert "2 of 5 rows (40.0 %) have Response tokens 0" in note and "line 3" in note


def test_vllm_bench_lengths_with_a_drawn_schedule() -> None:
    a = read_trace(_config("vllm_bench.json", format="vllm-bench"))
    assert a.prompt_tokens.tolist() == [512, 128, 64, 300]  # the failed request left out
    assert a.output_tokens.tolist() == [32, 16, 8, 64]
    assert any("1 of 5 requests failed" in n for n in a.notes)
    assert any("schedule_seed 0" in n for n in a.notes)
    assert np.all(np.diff(a.offsets_s) >= 0) and a.offsets_s[0] == 0.0
    again = read_trace(_config("vllm_bench.json", schedule_seed=0))
    other = read_trace(_config("vllm_bench.json", schedule_seed=7))
    np.testing.assert_array_equal(a.offsets_s, again.offsets_s)
    assert not np.array_equal(a.offsets_s, other.offsets_s)


def test_vllm_bench_closed_loop_is_refused(tmp_path: Path) -> None:
    obj = json.loads((FIXTURES / "vllm_bench.json").read_text())
    p = tmp_path / "r.json"
    p.write_text(json.dumps({**obj, "request_rate": "inf", "max_concurrency": 8}))
    with pytest.raises(SpecplanError, match=r"r\.json: max_concurrency 8 with request_rate inf is a closed loop"):
        read_trace(p)
    p.write_text(json.dumps({**obj, "max_concurrency": 8}))
    assert any("--max-concurrency 8" in n for n in read_trace(p).notes)
    assert read_trace(p).max_concurrency == 8


def test_generic_csv_and_jsonl_through_a_mapping() -> None:
    csv = read_trace(_config("generic.csv", format="csv", columns=TraceColumns(
        timestamp="arrived_ms", prompt_tokens="in", output_tokens="out", timestamp_unit="ms")))
    np.testing.assert_allclose(csv.offsets_s, [0.0, 0.25, 0.25, 1.0])
    assert csv.prompt_tokens.tolist() == [100, 300, 50, 80] and csv.output_tokens.tolist() == [20, 40, 5, 16]
    jl = read_trace(_config("generic.jsonl", format="jsonl", columns=TraceColumns(
        timestamp="sent", prompt_tokens="prompt", output_tokens="completion", timestamp_unit="datetime",
        hash_ids="blocks", hash_block_tokens=16)))
    np.testing.assert_allclose(jl.offsets_s, [0.0, 1.5, 1.75])
    assert [jl.hash_ids_of(i).tolist() for i in range(3)] == [[7, 8], [7, 9], [10]]
    assert jl.hash_block_tokens == 16


# ---------------------------------------------------------------- the same rows in every format


def _write(fmt: str, folder: Path, ms: list[int], prompt: list[int], output: list[int]) -> TraceConfig:
    cols = TraceColumns(timestamp="t", prompt_tokens="p", output_tokens="o", timestamp_unit="ms")
    if fmt == "azure":
        text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
            f"2023-11-16 {t // 3_600_000:02d}:{t // 60_000 % 60:02d}:{t // 1000 % 60:02d}.{t % 1000:03d},{p},{o}\n"
            for t, p, o in zip(ms, prompt, output, strict=True))
    elif fmt == "burstgpt":
        text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
            f"{t / 1000},ChatGPT,{p},{o},{p + o},API log\n" for t, p, o in zip(ms, prompt, output, strict=True))
    elif fmt in ("mooncake", "jsonl"):
        keys = ("timestamp", "input_length", "output_length") if fmt == "mooncake" else ("t", "p", "o")
        text = "".join(json.dumps(dict(zip(keys, row, strict=True))) + "\n"
                       for row in zip(ms, prompt, output, strict=True))
    else:
        text = "o,t,p\n" + "".join(f"{o},{t},{p}\n" for t, p, o in zip(ms, prompt, output, strict=True))
    path = folder / f"t-{fmt}.txt"
    path.write_text(text, encoding="utf-8")
    return TraceConfig(path=str(path), format=fmt,  # type: ignore[arg-type]
                       columns=cols if fmt in ("csv", "jsonl") else None)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 86_399_000), st.integers(0, 10**6), st.integers(1, 10**6)),
                min_size=1, max_size=30))
def test_every_format_reads_the_same_rows_alike(tmp_path_factory: pytest.TempPathFactory,
                                                rows: list[tuple[int, int, int]]) -> None:
    folder = tmp_path_factory.mktemp("fmt")
    ms = sorted(r[0] for r in rows)
    prompt = [r[1] for r in rows]
    output = [r[2] for r in rows]  # ≥ 1: BurstGPT leaves zero-output rows out
    want = (np.asarray(ms, np.float64) - ms[0]) / 1000
    for fmt in ("azure", "burstgpt", "mooncake", "csv", "jsonl"):
        tr = read_trace(_write(fmt, folder, ms, prompt, output))
        np.testing.assert_allclose(tr.offsets_s, want, rtol=0, atol=1e-6, err_msg=fmt)
        assert tr.prompt_tokens.tolist() == prompt and tr.output_tokens.tolist() == output, fmt


# ---------------------------------------------------------------- bad input: one line, file, line, field

_MOON = '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n'
_BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
_GEN = TraceColumns(timestamp="t", prompt_tokens="p", output_tokens="o")
BAD = [
    # (format, file text, columns, expected pieces of the message)
    ("mooncake", _MOON + '{"timestamp": 5, "output_length": 2, "hash_ids": []}\n', None,
     ("t.txt:2:", "missing key 'input_length'")),
    ("mooncake", _MOON + '{"timestamp": 5, "input_length": -4, "output_length": 2, "hash_ids": []}\n', None,
     ("t.txt:2:", "input_length -4 is not a token count")),
    ("mooncake", _MOON + '{"timestamp": 5, "input_length": 4, "output_length": 2, "hash_ids": [1, "x"]}\n', None,
     ("t.txt:2:", "hash_ids[1] 'x' is not a block id")),
    ("mooncake", '{"timestamp": 9, "input_length": 5, "output_length": 2, "hash_ids": [3]}\n' + _MOON, None,
     ("t.txt:2:", "timestamp 0 is earlier than the previous row's 9")),
    ("mooncake", _MOON + "{not json\n", None, ("t.txt:2:", "invalid JSON")),
    ("mooncake", "\n\n", None, ("t.txt:1:", "empty trace file")),
    ("burstgpt", "Timestamp,Model,Request tokens,Total tokens,Log Type\n1,x,2,3,y\n", None,
     ("t.txt:1:", "missing column 'Response tokens'")),
    ("burstgpt", _BURST + "1,ChatGPT,10,5,15,API log\n2,ChatGPT,1e3,5,15,API log\n", None,
     ("t.txt:3:", "Request tokens '1e3' is not a token count")),
    ("burstgpt", _BURST + "9,ChatGPT,10,5,15,API log\n2,ChatGPT,10,5,15,API log\n", None,
     ("t.txt:3:", "Timestamp '2' is earlier than the previous row's '9'")),
    ("burstgpt", _BURST + "1,ChatGPT,10,5,15\n", None, ("t.txt:2:", "expected 6 fields")),
    ("burstgpt", "", None, ("t.txt:1:", "empty trace file")),
    ("burstgpt", _BURST, None, ("t.txt:2:", "header but no rows")),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+25:99x,1,1\n", None,
     ("t.txt:2:", "TIMESTAMP '2024-05-10 00:00:00+25:99x' is not a time")),
    ("azure", "", None, ("t.txt:1:", "bad header")),
    ("csv", "t,p\n1,2\n", _GEN, ("t.txt:1:", "missing column 'o'")),
    ("csv", "t,p,o\n1,2,3\nsoon,2,3\n", _GEN, ("t.txt:3:", "t 'soon' is not a time in s")),
    ("csv", "t,p,o\n1,2,3\n0.5,2,3\n", _GEN, ("t.txt:3:", "t '0.5' is earlier than the previous row's '1'")),
    ("csv", "", _GEN, ("t.txt:1:", "empty trace file")),
    ("jsonl", '{"t": 1, "p": 2}\n', _GEN, ("t.txt:1:", "missing key 'o'")),
    ("jsonl", '{"t": 1, "p": 2, "o": 2.5}\n', _GEN, ("t.txt:1:", "o 2.5 is not a token count")),
    ("jsonl", '{"t": 2, "p": 2, "o": 2}\n{"t": 1, "p": 2, "o": 2}\n', _GEN,
     ("t.txt:2:", "t 1 is earlier than the previous row's 2")),
    ("jsonl", "[1, 2]\n", _GEN, ("t.txt:1:", "expected one JSON object per line")),
    ("vllm-bench", '{"request_rate": 1, "duration": 1, "input_lens": [1], "output_lens": [1, 2], '
                   '"ttfts": [0.1], "itls": [[]]}', None, ("t.txt", "output_lens", "has 2 entries")),
    ("vllm-bench", '{"request_rate": 1, "duration": 1, "input_lens": [-1], "output_lens": [1], '
                   '"ttfts": [0.1], "itls": [[]]}', None, ("t.txt", "input_lens[0]", "integer >= 0")),
    ("vllm-bench", "", None, ("t.txt", "empty file")),
]


@pytest.mark.parametrize(("fmt", "text", "cols", "expected"), BAD,
                         ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_is_one_line_naming_file_line_and_field(
        tmp_path: Path, fmt: str, text: str, cols: TraceColumns | None, expected: tuple[str, ...]) -> None:
    p = tmp_path / "t.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecplanError) as info:
        read_trace(TraceConfig(path=str(p), format=fmt, columns=cols))  # type: ignore[arg-type]
    msg = str(info.value)
    assert "\n" not in msg
    for piece in expected:
        assert piece in msg, msg


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "csv", "mooncake", "jsonl"])
def test_an_absurdly_long_number_is_echoed_short(tmp_path: Path, fmt: str) -> None:
    huge = "9" * 1000
    text = {"azure": f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,{huge},1\n",
            "burstgpt": f"{_BURST}1,ChatGPT,{huge},5,15,API log\n",
            "csv": f"t,p,o\n1,{huge},3\n",
            "mooncake": f'{{"timestamp": 0, "input_length": {huge}, "output_length": 2}}\n',
            "jsonl": f'{{"t": 0, "p": {huge}, "o": 2}}\n'}[fmt]
    p = tmp_path / "t.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecplanError) as info:
        read_trace(TraceConfig(path=str(p), format=fmt,  # type: ignore[arg-type]
                               columns=_GEN if fmt in ("csv", "jsonl") else None))
    msg = str(info.value)
    assert "t.txt:2:" in msg or "t.txt:1:" in msg
    assert len(msg) < 400 and "\n" not in msg and "characters)" in msg, msg


def test_a_number_python_will_not_parse_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "t.txt"
    p.write_text(f'{{"timestamp": 0, "input_length": {"9" * 5000}, "output_length": 2}}\n', encoding="utf-8")
    with pytest.raises(SpecplanError, match=r"t\.txt:1: a number with thousands of digits"):
        read_trace(TraceConfig(path=str(p), format="mooncake"))


@pytest.mark.parametrize(("text", "expected"), [
    ("a,b,c\n1,2,3\n", "t.txt:1: bad header 'a,b,c'; valid: TIMESTAMP,ContextTokens,GeneratedTokens"),
    ('{"t": 1, "p": 2, "o": 3}\n', "t.txt:1: JSON with neither Mooncake's keys"),
    ("", "t.txt:1: empty trace file"),
])
def test_detection_refuses_what_matches_no_format(tmp_path: Path, text: str, expected: str) -> None:
    p = tmp_path / "t.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(SpecplanError) as info:
        read_trace(p)
    assert expected in str(info.value) and "workload.trace.format" in str(info.value)


@pytest.mark.parametrize(("kw", "expected"), [
    ({"format": "csv"}, "columns: required for format 'csv'"),
    ({"format": "azure", "columns": _GEN}, "columns: only used by formats"),
    ({"format": "mooncake", "schedule_seed": 1}, "schedule_seed: only used by format \"vllm-bench\""),
    ({"format": "csv", "columns": TraceColumns("t", "p", "o", hash_ids="h")}, "columns.hash_ids: only read from JSONL"),
])
def test_config_refuses_fields_of_another_format(kw: dict, expected: str) -> None:
    with pytest.raises(SpecplanError, match=expected):
        _config("generic.csv", **kw)


def test_a_vllm_only_field_on_a_detected_csv_is_refused() -> None:
    with pytest.raises(SpecplanError, match=r"azure_2023\.csv: workload\.trace\.run_index: only used by format"):
        read_trace(_config("azure_2023.csv", run_index=0))

"""Importing acceptance from vLLM's Prometheus /metrics text."""

from __future__ import annotations

import http.server
import threading

import pytest

from profiler.imported.vllm_import import (
    entry_from_counters,
    import_vllm_metrics,
    parse_exposition,
    read_source,
    spec_counters,
)
from profiler.measured_acceptance.acceptance import check_entry
from sim.contracts.errors import SpecplanError

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _engine(
    engine: int, drafts: int, tokens: int, per_pos: list[int], model: str = MODEL,
    accepted: int | None = None,
) -> str:
    """What prometheus_client prints for vLLM's SpecDecodingProm counters of one engine."""
    lab = f'engine="{engine}",model_name="{model}"'
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts:.1f}",
        "# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_created gauge",
        f"vllm:spec_decode_num_drafts_created{{{lab}}} 1.7648e+09",
        "# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.",
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {tokens:.1f}",
        "# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {sum(per_pos) if accepted is None else accepted:.1f}",
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{i}"}} {a:.1f}'
        for i, a in enumerate(per_pos)
    ]
    return "\n".join(lines)


HEADER = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%s"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="%s"} 48211.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="%s"} 12.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="%s"} 40.0
""".replace("%s", MODEL)

TWO_ENGINES = (
    HEADER
    + _engine(0, 1000, 2800, [700, 480, 300, 150])
    + "\n"
    + _engine(1, 500, 1400, [320, 200, 110, 60])
    + "\n"
)


@pytest.fixture
def metrics_file(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text(TWO_ENGINES, encoding="utf-8")
    return path


def test_parse_exposition_labels_and_values():
    samples = parse_exposition(
        'a_total{x="1",y="he said \\"hi\\", ok"} 3.0 1700000000\nb 2e3\n# comment\n', "f"
    )
    assert samples[0].labels == {"x": "1", "y": 'he said "hi", ok'}
    assert samples[0].value == 3.0 and samples[1].value == 2000.0


def test_engines_are_summed_and_entry_is_valid(metrics_file):
    entry = import_vllm_metrics(str(metrics_file), task="summarization", language="en")
    check_entry(entry)
    assert entry["k_max"] == 4
    seg = entry["segments"][0]
    assert seg["segment"] == {"task": "summarization", "language": "en", "temperature": 0.0}
    assert seg["num_drafts"] == 1500
    assert seg["accepted_per_pos"] == [1020, 680, 410, 210]
    assert seg["num_accepted_tokens"] == 2320
    assert seg["num_draft_tokens"] == 1500 * 4
    assert seg["per_request"] == []
    prov = entry["provenance"]
    assert prov["method"] == "imported"
    assert prov["models"] == {"target": MODEL}
    assert "4200 draft tokens" in prov["notes"]  # what vLLM itself reported
    assert "2 engine(s)" in prov["notes"] and "spread across requests unknown" in prov["notes"]


def test_counters_without_total_suffix_or_labels():
    text = "\n".join([
        "vllm:spec_decode_num_drafts 10",
        "vllm:spec_decode_num_draft_tokens 30",
        "vllm:spec_decode_num_accepted_tokens 12",
        'vllm:spec_decode_num_accepted_tokens_per_pos{position="0"} 7',
        'vllm:spec_decode_num_accepted_tokens_per_pos{position="1"} 4',
        'vllm:spec_decode_num_accepted_tokens_per_pos{position="2"} 1',
    ])
    c = spec_counters(text, "m.txt")
    assert (c.num_drafts, c.num_draft_tokens, c.accepted_per_pos) == (10, 30, (7, 4, 1))
    assert c.models == ()


def test_baseline_subtraction(tmp_path, metrics_file):
    base = tmp_path / "before.txt"
    base.write_text(_engine(0, 400, 1100, [300, 200, 100, 50]) + "\n"
                    + _engine(1, 100, 300, [60, 40, 20, 10]), encoding="utf-8")
    entry = import_vllm_metrics(str(metrics_file), baseline=str(base))
    seg = entry["segments"][0]
    assert seg["num_drafts"] == 1000
    assert seg["accepted_per_pos"] == [660, 440, 290, 150]
    assert "minus baseline" in entry["provenance"]["notes"]


def test_several_models_need_a_choice(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text(_engine(0, 10, 20, [5, 2]) + "\n" + _engine(0, 8, 16, [4, 1], model="other"),
                    encoding="utf-8")
    with pytest.raises(SpecplanError, match="several models"):
        import_vllm_metrics(str(path))
    entry = import_vllm_metrics(str(path), model_name="other")
    assert entry["segments"][0]["accepted_per_pos"] == [4, 1]
    with pytest.raises(SpecplanError, match="'nope' not found; available: .*other"):
        import_vllm_metrics(str(path), model_name="nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEADER, "no vLLM speculative-decoding counters"),
        ("vllm:spec_decode_num_drafts_total 5\nthis is not prometheus", "m.txt:2: not a Prometheus"),
        ("vllm:spec_decode_num_drafts_total abc", "m.txt:1: value 'abc'"),
        ('vllm:spec_decode_num_drafts_total{engine=0} 1', "m.txt:1: cannot parse labels"),
        ("vllm:spec_decode_num_drafts_total 5\nvllm:spec_decode_num_accepted_tokens_total 3",
         "no vllm:spec_decode_num_accepted_tokens_per_pos"),
        (_engine(0, 0, 0, [0, 0]), "no drafts to import"),
        (_engine(0, 10, 30, [3, 5, 1]), "non-increasing"),
        (_engine(0, 10, 30, [3, 2, 1], accepted=7), "inconsistent"),
        ("vllm:spec_decode_num_drafts_total -3", "not a non-negative count"),
    ],
)
def test_bad_metrics(tmp_path, text, message):
    path = tmp_path / "m.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecplanError, match=message):
        import_vllm_metrics(str(path))


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.5:8000/metrics", "http://example.com/metrics", "https://vllm.internal/metrics",
     "ftp://localhost/metrics"],
)
def test_only_local_urls_are_read(url):
    with pytest.raises(SpecplanError) as err:
        read_source(url)
    assert "refused" in str(err.value) or "only http" in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecplanError, match="not found"):
        read_source(str(tmp_path / "none.txt"))


def test_reads_a_local_metrics_endpoint():
    body = TWO_ENGINES.encode("utf-8")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        entry = import_vllm_metrics(url, temperature=0.7)
    finally:
        server.shutdown()
        server.server_close()
    assert entry["segments"][0]["num_drafts"] == 1500
    assert entry["segments"][0]["segment"]["temperature"] == 0.7
    assert url in entry["provenance"]["notes"]


def test_entry_from_counters_rejects_negative_temperature(metrics_file):
    c = spec_counters(TWO_ENGINES, "m")
    with pytest.raises(SpecplanError, match="temperature"):
        entry_from_counters(c, "m", temperature=-1.0)


def test_simulator_reads_the_entry(metrics_file):
    from sim.contracts.profile import Profile
    from sim.contracts.synthetic import synthetic_profile_dict

    d = synthetic_profile_dict()
    d["acceptance"]["ngram"] = import_vllm_metrics(str(metrics_file), task="chat", language="en")
    profile = Profile.from_dict(d, "imported.json")
    assert any(line.startswith("acceptance[ngram]: imported") for line in profile.sources())

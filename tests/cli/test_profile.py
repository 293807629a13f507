"""`specplan profile` end to end: a tiny profile, estimate, merge, and one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli.main import main
from sim.contracts.profile import load_profile


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code: int, err: str, words: str) -> None:
    assert code == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert words in lines[0]
    assert "Traceback" not in err


def test_tiny_profile_end_to_end(tmp_path: Path, capsys):
    out = tmp_path / "tiny.json"
    code, stdout, err = run_cli(["profile", "--target", "config:tiny-llama", "--proposer", "ngram",
                                 "--proposer", "selfdraft:2", "--quick", "--k-max", "3", "--device", "cpu",
                                 "--reserve-fraction", "0.1", "--no-progress", "-o", str(out)], capsys)
    assert code == 0, err
    prof = load_profile(out)
    # memory kept for other applications and the process's peak, recorded and said in the summary
    assert prof.memory.reserve is not None and prof.memory.reserve.rule.startswith("--reserve-fraction 0.1 of")
    assert prof.memory.reserve_bytes == int(0.1 * prof.memory.device_memory_bytes)
    assert "reserved for other applications" in stdout and "process peak RSS" in stdout
    assert prof.target.source == "config-only"
    assert set(prof.proposers) == {"ngram", "selfdraft-l2"}
    assert prof.acceptance == {}
    raw = json.loads(out.read_text())
    assert "acceptance not measured: config-only weights" in raw["proposers"]["ngram"]["note"]
    assert raw["timing"]["provenance"]["method"] == "measured"
    command = raw["timing"]["provenance"]["command"]
    assert command.startswith("specplan profile ") and "--target config:tiny-llama" in command
    assert "--quick" in command and str(tmp_path) not in command  # no machine paths
    assert "wrote" in stdout and "[measured]" in stdout
    assert "load average" in raw["timing"]["provenance"]["notes"]
    # a padded engine's batch join/leave cost is measured in every run, on the forward grid's axes
    pb = prof.timing.padded_batch
    assert pb is not None and pb.join.axes[0] == prof.timing.target_forward.axes[0]
    assert np.all(pb.join.median > 0) and np.all(pb.leave.median > 0)
    assert "padded_batch: the serving loop's own BatchExecutor" in raw["timing"]["provenance"]["notes"]


def test_padded_batch_action_adds_the_grids_with_their_own_provenance(tmp_path: Path, capsys):
    base = tmp_path / "base.json"
    code, _, err = run_cli(["profile", "--target", "config:tiny-llama", "--quick", "--device", "cpu",
                            "--no-progress", "-o", str(base)], capsys)
    assert code == 0, err
    raw = json.loads(base.read_text())
    del raw["timing"]["padded_batch"]  # as a profile measured before the grids existed
    base.write_text(json.dumps(raw))
    out = tmp_path / "with.json"
    code, stdout, err = run_cli(["profile", "padded-batch", "--profile", str(base), "--target",
                                 "config:tiny-llama", "--device", "cpu", "-o", str(out)], capsys)
    assert code == 0, err
    prof = load_profile(out)
    pb = prof.timing.padded_batch
    assert pb is not None and pb.provenance is not None and pb.provenance.method == "measured"
    assert "specplan profile padded-batch" in (pb.provenance.command or "")
    assert np.array_equal(prof.timing.target_forward.median, load_profile(base).timing.target_forward.median)
    assert "timing.padded_batch measured on cpu" in stdout
    # another model's profile is refused in one line
    code, _, err = run_cli(["profile", "padded-batch", "--profile", str(base), "--target",
                            "config:smollm2-135m", "--device", "cpu", "-o", str(tmp_path / "x.json")], capsys)
    assert_one_line_error(code, err, "measure with the profile's own target")


def test_draft_model_proposer_profile(tmp_path: Path, capsys):
    out = tmp_path / "draft.json"
    code, _, err = run_cli(["profile", "--target", "config:tiny-llama", "--proposer", "draft:config:tiny-llama",
                            "--quick", "--k-max", "2", "--device", "cpu", "--no-progress", "-o", str(out)], capsys)
    assert code == 0, err
    prof = load_profile(out)
    (name,) = prof.proposers
    assert prof.proposers[name].kind == "draft_model"
    assert prof.memory.proposers[name].weight_bytes == prof.memory.target_weight_bytes
    assert prof.timing.proposers[name].draft.median.shape[1] == 2


def test_estimate_cli(tmp_path: Path, capsys):
    out = tmp_path / "h100.json"
    code, stdout, err = run_cli(["profile", "estimate", "--gpu", "H100", "--target", "config:llama-3.1-8b",
                                 "--proposer-model", "config:llama-3.2-1b", "-o", str(out)], capsys)
    assert code == 0, err
    prof = load_profile(out)
    assert prof.timing.provenance.method == "estimated"
    assert "llama-3.2-1b-shaped" in prof.proposers
    assert "[estimated]" in stdout


def test_merge_keeps_each_sections_provenance(tmp_path: Path, capsys):
    timing = tmp_path / "t.json"
    assert run_cli(["profile", "estimate", "--gpu", "A100-80GB", "--target", "config:llama-3.1-8b",
                    "--proposer", "selfdraft:8", "-o", str(timing)], capsys)[0] == 0
    acc = tmp_path / "acc.json"
    seg = {"segment": {"task": "chat", "language": "en", "temperature": 0.0}, "num_drafts": 10,
           "num_draft_tokens": 20, "num_accepted_tokens": 12, "accepted_per_pos": [7, 5]}
    acc.write_text(json.dumps({
        "schema": "specplan.acceptance", "name": "pub",
        "proposers": {"selfdraft-l8": {"kind": "self_draft", "layers": list(range(8))}},
        "acceptance": {"selfdraft-l8": {"provenance": {"method": "published", "citation": "a paper, table 2"},
                                        "k_max": 2, "segments": [seg]}},
        "x-run": {"wall_s": 123.0, "phases_s": {"acceptance": 120.0}},
    }))
    out = tmp_path / "merged.json"
    code, _, err = run_cli(["profile", "merge", "--timing", str(timing), "--acceptance", str(acc), "-o", str(out)], capsys)
    assert code == 0, err
    prof = load_profile(out)
    assert prof.timing.provenance.method == "estimated"
    assert prof.acceptance["selfdraft-l8"].provenance.method == "published"
    assert "merged from acc.json" in prof.acceptance["selfdraft-l8"].provenance.notes
    # the record of the run that measured acceptance travels with it
    assert json.loads(out.read_text())["x-run"]["acceptance_run"]["wall_s"] == 123.0
    # merging new timing with a merged profile keeps the run that measured acceptance, not a chain
    again = tmp_path / "again.json"
    code, _, err = run_cli(["profile", "merge", "--timing", str(timing), "--acceptance", str(out), "-o", str(again)],
                           capsys)
    assert code == 0, err
    run = json.loads(again.read_text())["x-run"]["acceptance_run"]
    assert run["wall_s"] == 123.0 and "acceptance_run" not in run


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--target", "/no/such/model.gguf"], "no such GGUF"),
        (["--target", "config:nope"], "built-in"),
        (["--target", "config:tiny-llama", "--proposer", "bogus"], "--proposer"),
        (["--target", "config:tiny-llama", "--proposer", "draft:config:smollm2-135m"], "tokenizer does not match"),
        (["--target", "config:tiny-llama", "--temperatures", "a,b"], "--temperatures"),
        ([], "--target"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(argv, words, tmp_path: Path, capsys):
    code, _, err = run_cli(["profile", *argv, "--device", "cpu", "--no-progress", "-o", str(tmp_path / "x.json")], capsys)
    assert_one_line_error(code, err, words)


def test_garbage_gguf_exits_2(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"\x00" * 64)
    code, _, err = run_cli(["profile", "--target", str(bad), "-o", str(tmp_path / "x.json")], capsys)
    assert_one_line_error(code, err, "could not be loaded")


def test_empty_prompt_file_exits_2_before_loading(tmp_path: Path, capsys):
    empty = tmp_path / "p.jsonl"
    empty.write_text("")
    code, _, err = run_cli(["profile", "--target", "smollm2", "--proposer", "ngram", "--prompts", str(empty),
                            "-o", str(tmp_path / "x.json")], capsys)
    assert_one_line_error(code, err, "p.jsonl")


def test_unwritable_output_exits_2(tmp_path: Path, capsys):
    code, _, err = run_cli(["profile", "--target", "config:tiny-llama", "-o", str(tmp_path / "nope" / "x.json")], capsys)
    assert_one_line_error(code, err, "does not exist")
    code, _, err = run_cli(["profile", "estimate", "--gpu", "H100", "--target", "config:llama-3.1-8b",
                            "-o", str(tmp_path)], capsys)
    assert_one_line_error(code, err, "is a directory")


def test_estimate_errors(tmp_path: Path, capsys):
    out = str(tmp_path / "x.json")
    code, _, err = run_cli(["profile", "estimate", "--gpu", "TPU", "--target", "config:llama-3.1-8b", "-o", out], capsys)
    assert_one_line_error(code, err, "unknown GPU")
    code, _, err = run_cli(["profile", "estimate", "--gpu", "H100", "--target", "config:llama-3.1-8b",
                            "--proposer", "medusa", "-o", out], capsys)
    assert_one_line_error(code, err, "--proposer medusa: valid for the estimate: ngram, suffix, eagle, eagle3, mtp")
    code, _, err = run_cli(["profile", "merge", "--timing", str(tmp_path / "none.json"), "--acceptance", "x",
                            "-o", out], capsys)
    assert_one_line_error(code, err, "no such profile")


def test_published_and_imported_acceptance_attach_to_a_profile(tmp_path: Path, capsys):
    base = tmp_path / "base.json"
    assert run_cli(["profile", "estimate", "--gpu", "H100", "--target", "config:llama-3.1-8b",
                    "--proposer-model", "config:llama-3.2-1b", "-o", str(base)], capsys)[0] == 0
    pub = tmp_path / "pub.json"
    code, _, err = run_cli(["profile", "published", "--rates", "0.8,0.6,0.45", "--citation", "Paper X, table 3",
                            "--proposer", "llama-3.2-1b-shaped", "--segment", "chat:en:0", "--profile", str(base),
                            "-o", str(pub)], capsys)
    assert code == 0, err
    entry = load_profile(pub).acceptance["llama-3.2-1b-shaped"]
    assert entry.provenance.method == "published" and entry.provenance.citation == "Paper X, table 3"
    assert entry.segments[0].survival == pytest.approx((0.8, 0.6, 0.45))

    metrics = tmp_path / "metrics.txt"
    metrics.write_text(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 150\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 70\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 50\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 30\n'
    )
    frag = tmp_path / "imported.json"
    code, stdout, err = run_cli(["profile", "import-vllm", "--metrics", str(metrics), "--proposer", "llama-3.2-1b-shaped",
                                 "--segment", "chat:en:0.7", "-o", str(frag)], capsys)
    assert code == 0, err and "merge" in stdout
    merged = tmp_path / "merged.json"
    code, _, err = run_cli(["profile", "merge", "--timing", str(base), "--acceptance", str(frag), "-o", str(merged)], capsys)
    assert code == 0, err
    imported = load_profile(merged).acceptance["llama-3.2-1b-shaped"]
    assert imported.provenance.method == "imported"
    assert imported.segments[0].accepted_per_pos == (70, 50, 30)


def test_published_needs_a_citation(tmp_path: Path, capsys):
    code, _, err = run_cli(["profile", "published", "--rates", "0.8", "--proposer", "x", "--segment", "chat:en:0",
                            "-o", str(tmp_path / "p.json")], capsys)
    assert_one_line_error(code, err, "--citation")


def test_merge_across_models_is_refused_unless_the_reason_is_given(tmp_path: Path, capsys):
    """Issue 32: SmolLM2's n-gram acceptance married a Llama-3.1-8B timing profile without a word."""
    repo = Path(__file__).resolve().parents[2]
    timing, acc = repo / "profiles" / "llama-3.1-8b-h200-vllm.json", repo / "profiles" / "smollm2-135m-cpu.json"
    out = tmp_path / "m.json"
    argv = ["profile", "merge", "--timing", str(timing), "--acceptance", str(acc), "--acceptance-proposer", "ngram",
            "-o", str(out)]
    code, _, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, "measured on other models than")
    assert "model 'HuggingFaceTB/SmolLM2-135M-Instruct' vs 'meta-llama/Meta-Llama-3.1-8B'" in err
    assert "vocab_size 49152 vs 128256" in err and "--accept-mismatch" in err and not out.exists()
    code, _, err = run_cli(argv + ["--accept-mismatch", "  "], capsys)
    assert_one_line_error(code, err, "--accept-mismatch: give the reason in words")
    xeon = repo / "profiles" / "smollm2-135m-cpu-xeon.json"
    code, _, err = run_cli(["profile", "merge", "--timing", str(xeon), "--acceptance", str(timing), "--acceptance-proposer",
                            "ngram", "--accept-mismatch", "prompt lookup hits depend on the text", "-o", str(out)], capsys)
    assert code == 0, err
    notes = load_profile(out).acceptance["ngram"].provenance.notes
    assert "identity mismatch accepted" in notes and "prompt lookup hits depend on the text" in notes
    # the same model measured on another machine merges as before (profiles/smollm2-135m-cpu-xeon.json)
    same = tmp_path / "same.json"
    code, _, err = run_cli(["profile", "merge", "--timing", str(repo / "profiles" / "smollm2-135m-cpu-xeon.json"),
                            "--acceptance", str(acc), "--acceptance-proposer", "ngram", "-o", str(same)], capsys)
    assert code == 0, err


def test_interval_action_adds_prompts_and_interval_from_the_stored_rows(tmp_path: Path, capsys):
    """`specplan profile interval`: a profile written before issue 41 gains each segment's sample
    size and bootstrap interval from its per-prompt rows; the same seed gives the same file; the
    result says where they came from; a profile that has them gains nothing."""
    from sim.contracts.synthetic import synthetic_profile_dict

    old = tmp_path / "old.json"
    old.write_text(json.dumps(synthetic_profile_dict(acceptance_rates=(0.7, 0.5), per_request_rows=7)))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        code, stdout, err = run_cli(["profile", "interval", "--profile", str(old), "-o", str(out)], capsys)
        assert code == 0, err
        assert "interval for 1 segment(s)" in stdout
    assert a.read_bytes() == b.read_bytes()
    seg = load_profile(a).acceptance["ngram"].segments[0]
    assert seg.uncertainty.prompts == 7 and seg.uncertainty.has_interval
    assert "bootstrap over the stored per_request rows" in load_profile(a).acceptance["ngram"].provenance.notes
    code, stdout, _ = run_cli(["profile", "interval", "--profile", str(a), "-o", str(tmp_path / "c.json")], capsys)
    assert code == 0 and "interval for 0 segment(s)" in stdout
    code, _, err = run_cli(["profile", "interval", "-o", str(tmp_path / "d.json")], capsys)
    assert_one_line_error(code, err, "--profile BASE.json is required")


def test_merge_of_a_published_library_entry_checks_its_target_by_name(tmp_path: Path, capsys):
    """Library files name their target as a string (profiles/acceptance/*.json); merging one
    onto the same model works, onto another is refused in one line (it crashed on both)."""
    repo = Path(__file__).resolve().parents[2]
    lib = repo / "profiles" / "acceptance" / "vllm-ci-llama-3.1-8b-eagle3.json"
    out = tmp_path / "merged.json"
    assert main(["profile", "merge", "--timing", str(repo / "profiles" / "llama-3.1-8b-h100-vllm.json"),
                 "--acceptance", str(lib), "-o", str(out)]) == 0
    assert "vllm-ci-llama-3.1-8b-eagle3" in load_profile(out).acceptance
    capsys.readouterr()
    assert main(["profile", "merge", "--timing", str(repo / "profiles" / "smollm2-135m-cpu.json"),
                 "--acceptance", str(lib), "-o", str(tmp_path / "other.json")]) == 2
    err = capsys.readouterr().err
    assert "measured on other models" in err and "internal error" not in err and len(err.strip().splitlines()) == 1


def test_a_bad_reserve_is_refused_before_any_model_is_loaded(tmp_path: Path, capsys):
    code, _, err = run_cli(["profile", "--target", "config:tiny-llama", "--reserve-gb", "-2", "--device", "cpu",
                            "--no-progress", "-o", str(tmp_path / "p.json")], capsys)
    assert_one_line_error(code, err, "--reserve-gb -2.0: must be a number of GiB >= 0")
    assert not (tmp_path / "p.json").exists()

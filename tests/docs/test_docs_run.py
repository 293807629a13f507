"""Docs that run (issue 41, item 7): every command block of README.md and docs/*.md that calls
``specplan`` or ``make`` runs here on the shipped profiles and scenarios, so an example that
exits 2 fails the suite.

Each command runs in its own folder (the repository's ``scenarios/`` and ``profiles/`` linked in;
nothing it writes lands in the repository) through ``cli.main.main``, as typed, its optional
``[...]`` arguments left out. What cannot run here is listed below with its reason, and a rule
that no longer matches a documented command fails too, so the lists cannot rot:

- ``PARSE_ONLY``: commands that measure with torch for minutes to hours, serve until stopped or
  need a server; their arguments are still parsed by the command's own parser;
- ``STAND_INS``: the reader's own files an example names (vLLM result files, a scenario of their
  server, a GPU profile), stood in for by shipped or fixture files or by the documented command
  that writes them;
- ``EXTRA_ARGS``: arguments added for the test, with why;
- ``MAKE``: make targets, each run through its recipe's command or skipped with a reason.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
from pathlib import Path

import pytest

from cli.main import COMMANDS, main
from tests.docs.doc_commands import REPO, DocCommand, doc_commands

LINKED = ("scenarios", "profiles", "docs")

PARSE_ONLY: dict[str, str] = {
    r"^specplan profile --target ": "measures on this machine with torch (minutes to hours; the block "
                                   "beside it gives the times); a GPU target needs a GPU",
    r"^specplan profile padded-batch ": "measures padded-batch joins and leaves with torch (about 2 minutes)",
    r"^specplan profile merge --timing (timing|merged)\.json ": "merges the outputs of the measuring commands "
                                                                "beside it, which are not run here",
    r"^specplan validate scenarios/validate-cpu\.toml ": "serves the scenario for real with torch "
                                                        "(40 minutes and more; docs/fidelity.md)",
    r"^specplan dashboard": "serves until stopped (tests/dashboard drive the app in a browser)",
    r"--metrics http://": "scrapes a running vLLM server's /metrics",
}

VLLM_BENCH = "tests/sim/contracts/traces/vllm_bench.json"
SERVER_SCENARIO = "scenarios/gpu-chat-h200.toml"
GPU_PROFILE = "profiles/llama-3.1-8b-h100-vllm.json"


def _copy(src: str, *, drop_acceptance: str | None = None):
    """A stand-in written from a shipped file: a scenario's ``../profiles/`` made relative to the
    folder it is copied to; a profile with one proposer's acceptance left out."""
    def write(dest: Path) -> None:
        text = (REPO / src).read_text(encoding="utf-8")
        if src.endswith(".toml"):
            text = text.replace('"../profiles/', '"profiles/')
        if drop_acceptance is not None:
            doc = json.loads(text)
            doc["acceptance"].pop(drop_acceptance)
            text = json.dumps(doc)
        dest.write_text(text, encoding="utf-8")
    write.source = src  # type: ignore[attr-defined]
    return write


STAND_INS: dict[str, tuple[object, str]] = {
    # a file the docs name as the reader's own: a shipped file to copy, or (a pattern) the
    # documented command that writes it; and why
    "vllm_bench.json": (_copy(VLLM_BENCH), "a vLLM bench result file (test fixture)"),
    "run.json": (_copy(VLLM_BENCH), "a vLLM bench result file (test fixture)"),
    "rate2.json": (_copy(VLLM_BENCH), "your vLLM runs at three rates (one fixture thrice)"),
    "rate6.json": (_copy(VLLM_BENCH), "your vLLM runs at three rates (one fixture thrice)"),
    "rate12.json": (_copy(VLLM_BENCH), "your vLLM runs at three rates (one fixture thrice)"),
    "S.toml": (_copy(SERVER_SCENARIO), "your server's scenario: a shipped vLLM Llama-3.1-8B one"),
    "my-vllm-server.toml": (_copy(SERVER_SCENARIO), "your server's scenario: a shipped vLLM Llama-3.1-8B one"),
    "my-vllm.toml": (_copy(SERVER_SCENARIO), "your server's scenario: a shipped vLLM Llama-3.1-8B one"),
    "gpu.json": (_copy(GPU_PROFILE, drop_acceptance="eagle3"),
                 "a GPU profile as a fresh measurement leaves it: eagle3's acceptance not yet published"),
    "acc.json": (r"^specplan profile published --rates ", "the acceptance file the command above writes"),
    "old.json": (_copy("profiles/smollm2-135m-cpu.json"), "a profile written before issue 41 (the shipped CPU one)"),
    "vllm-server.log": (_copy("tests/docs/fixtures/vllm-server.log"), "a vLLM server log with SpecDecoding lines"),
    "metrics.txt": (_copy("tests/docs/fixtures/metrics.txt"), "a /metrics scrape of your server"),
}

EXTRA_ARGS: dict[str, tuple[list[str], str]] = {
    r"^specplan calibrate \S+ --points ": (["--duration", "30", "--seeds", "1"], "a shorter simulation per load "
                                          "keeps this suite's CPU budget; tests/docs/test_crossover_doc.py reruns "
                                          "the documented ones in full against the numbers printed in the docs"),
    r"^specplan sweep ": (["--engine", "serial"], "the default Dask cluster starts a worker process per core "
                          "and a dashboard port; serial runs the same cells"),
}

MAKE: dict[str, str | None] = {
    # target: None = run its recipe's specplan command (this test's environment is the .venv it sets
    # up); a string = skipped, why
    "run": None,
    "test": "runs this suite (and installs Chromium)",
}

OUTPUT_FLAGS = ("-o", "--out", "--scenario-out", "--json")
DOCUMENTED = doc_commands()


def _rule(rules: dict, c: DocCommand) -> str | None:
    hits = [k for k in rules if re.search(k, c.shown)]
    assert len(hits) <= 1, f"{c.where}: several rules match: {hits}"
    return hits[0] if hits else None


def _inputs(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The stand-in names ``argv`` reads (a name after an output flag is written, not read)."""
    return [a for i, a in enumerate(argv) if a in STAND_INS and (i == 0 or argv[i - 1] not in OUTPUT_FLAGS)]


def _recipe(target: str) -> list[str]:
    """The specplan command of a Makefile target's recipe, its ``$(VENV)/bin/`` dropped."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, f"Makefile has no target {target!r}"
    lines = [ln.strip() for ln in m.group(1).splitlines() if "specplan " in ln]
    assert len(lines) == 1, f"make {target}: expected one specplan command in its recipe, got {lines}"
    return lines[0].split("bin/", 1)[1].split()


def _parse(argv: list[str]) -> None:
    """The command's own parser over its arguments (argparse refuses with exit 2: a failure)."""
    mod = importlib.import_module(COMMANDS[argv[0]][0])
    parser = argparse.ArgumentParser(prog=f"specplan {argv[0]}")
    mod.add_arguments(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv[1:])
        except SystemExit as exc:
            pytest.fail(f"arguments refused (exit {exc.code}): {err.getvalue().strip()}")


def _run(c: DocCommand, argv: list[str], folder: Path, capsys) -> None:
    extra = _rule(EXTRA_ARGS, c)
    argv = argv + (EXTRA_ARGS[extra][0] if extra else [])
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag in OUTPUT_FLAGS:
            assert REPO not in (folder / value).resolve().parents, f"{c.where}: {flag} {value} writes into the repo"
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 0, f"{c.where}: `{c.shown}` exited {rc}: {err.strip()[-600:]}"


TRACES = REPO.parent / "shared" / "traces"
"""The Azure LLM inference traces CI keeps beside the checkout (a user's clone has none)."""


@pytest.mark.parametrize("c", DOCUMENTED, ids=[c.where for c in DOCUMENTED])
def test_every_documented_command_runs_or_is_listed_with_its_reason(c: DocCommand, tmp_path, monkeypatch,
                                                                     capsys) -> None:
    argv = list(c.argv)
    if argv[0] == "make":
        target = argv[1]
        assert target in MAKE, f"{c.where}: make {target} is neither run nor listed with a reason in MAKE"
        if MAKE[target] is not None:
            pytest.skip(f"make {target}: {MAKE[target]}")
        argv = _recipe(target)
    argv = argv[1:]  # after "specplan"
    if _rule(PARSE_ONLY, c) is not None:
        _parse(argv)
        return
    for a in argv:  # a shipped scenario replaying the Azure traces beside the checkout (CI has them)
        f = REPO / a
        if a.endswith(".toml") and f.is_file() and "shared/traces" in f.read_text() and not TRACES.is_dir():
            pytest.skip(f"{c.where}: {a} replays ../shared/traces, absent beside this checkout")
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    for name in _inputs(argv):
        make, _why = STAND_INS[name]
        if callable(make):
            make(tmp_path / name)
        else:  # written by another documented command: run that one first
            producer = next(d for d in DOCUMENTED if re.search(make, d.shown))
            _run(producer, list(producer.argv[1:]), tmp_path, capsys)
    _run(c, argv, tmp_path, capsys)


def test_every_listed_rule_and_stand_in_is_used_by_a_documented_command() -> None:
    shown = [c.shown for c in DOCUMENTED]
    for rules in (PARSE_ONLY, EXTRA_ARGS):
        for pattern in rules:
            assert any(re.search(pattern, s) for s in shown), f"no documented command matches {pattern!r}"
    for name, (make, _why) in STAND_INS.items():
        assert any(name in _inputs(c.argv) for c in DOCUMENTED), f"stand-in {name} is read by no documented command"
        if callable(make):
            assert (REPO / make.source).is_file(), f"stand-in {name}: {make.source} is missing"
        else:
            assert sum(bool(re.search(make, s)) for s in shown) == 1, f"stand-in {name}: {make!r} is not one command"
    for target in MAKE:
        assert any(c.argv[:2] == ("make", target) for c in DOCUMENTED), f"make {target} is not documented"


def test_the_extractor_joins_continuations_and_drops_comments_and_optional_groups() -> None:
    readme = [c for c in DOCUMENTED if c.file == "README.md"]
    assert len(readme) >= 20
    sweep = next(c for c in readme if c.argv[1] == "sweep")
    assert sweep.argv[-2:] == ("--out", "sweep.parquet") and "candidates[ngram-k3].k=1,2,3" in sweep.argv
    simulate = next(c for c in readme if c.argv[1] == "simulate")
    assert simulate.argv == ("specplan", "simulate", "scenarios/default.toml")  # "[--out DIR] …" left out
    assert not any(a.startswith("[") or a.endswith("]") or a.startswith("#") for c in DOCUMENTED for a in c.argv)

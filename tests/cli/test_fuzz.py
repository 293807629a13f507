"""Hostile input through every loader and the CLI: exit 0 or 2, one line naming the input.

2,000 seeded cases (tests/fuzz_cases.py, tests/fuzz_feature_cases.py, tests/fuzz_trace_cases.py)
run in-process through ``cli.main.main``, the function the ``specplan`` script calls, and a
sample of 30 through the real command line as subprocesses. Any uncaught exception, traceback,
"internal error", exit code other than 0/2, run over 60 s, multi-line error or error that does
not name its input (or the field the case changed) fails the test, with one example per failure
class. bench/fuzz.py runs the same oracle over 20,000+ cases.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz_cases import FUZZ_MAX_REQUEST_STEPS, REPO
from tests.fuzz_oracle import fuzz

N_IN_PROCESS = 2000
SUBPROCESS_EVERY = 67  # 30 real CLI runs


@pytest.fixture(autouse=True)
def _work_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECPLAN_MAX_REQUEST_STEPS", FUZZ_MAX_REQUEST_STEPS)


def test_fuzz_every_loader_and_the_cli(tmp_path: Path) -> None:
    inproc, subproc = fuzz(N_IN_PROCESS, seed=19, folder=tmp_path, subprocess_every=SUBPROCESS_EVERY)
    assert inproc.inputs == N_IN_PROCESS
    assert subproc.inputs >= N_IN_PROCESS // SUBPROCESS_EVERY
    report = "\n".join(["in-process:", *inproc.lines(), "subprocess:", *subproc.lines()])
    assert not inproc.fails and not subproc.fails, report
    # the generator reaches past validation too: some cases simulate to the end
    assert inproc.exit_codes[0] > 20, report


def test_work_beyond_the_limit_is_refused_with_its_estimate(tmp_path: Path) -> None:
    from tests.fuzz_cases import BASE_SCENARIO, Case, to_toml
    from tests.fuzz_cases import _base_files as base_files
    from tests.fuzz_oracle import run_in_process

    tree = {**BASE_SCENARIO, "run": {**BASE_SCENARIO["run"], "duration_s": 1e9}}
    files = {**base_files(), "s.toml": to_toml(tree).encode()}
    o = run_in_process(Case("size", ["simulate", "s.toml", "--quiet"], files, ("s.toml",)), tmp_path)
    assert o.rc == 2 and o.seconds < 5
    assert "s.toml" in o.stderr and "requests per run" in o.stderr and "limit" in o.stderr


def test_a_long_shared_history_is_refused_with_its_estimate(tmp_path: Path) -> None:
    """Conversations of 10-million-token user turns under prefix caching: every prompt block is
    hashed before the run, so they count as work (the fuzzer found this running over 60 s)."""
    import json

    from tests.fuzz_cases import FEATURE_SCENARIO, Case, to_toml
    from tests.fuzz_cases import _base_files as base_files
    from tests.fuzz_oracle import run_in_process

    tree = json.loads(json.dumps(FEATURE_SCENARIO))
    tree["workload"]["segments"][0]["conversation"]["user_tokens"] = 10**7
    files = {**base_files(), "s.toml": to_toml(tree).encode()}
    o = run_in_process(Case("size", ["simulate", "s.toml", "--quiet"], files, ("s.toml",)), tmp_path)
    assert o.rc == 2 and o.seconds < 10, o
    assert "request-steps" in o.stderr and "shorter prompts" in o.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    """`specplan breakeven … | head -1`: no BrokenPipeError traceback, exit 141 (SIGPIPE)."""
    cmd = [sys.executable, "-m", "cli", "breakeven", "--alpha", "0.7", "--T-ms", "10", "--D-ms", "1",
           "--V-ms", "12", "--k", "1..1000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    err = proc.stderr.read().decode()
    rc = proc.wait(timeout=60)
    assert first.startswith(b"break-even")
    assert err == "", err
    assert rc in (0, 141)


def test_a_closed_pipe_through_the_shell() -> None:
    r = subprocess.run(
        f"{sys.executable} -m cli breakeven --alpha 0.7 --T-ms 10 --D-ms 1 --V-ms 12 --k 1..1000 | head -5",
        shell=True, capture_output=True, text=True, cwd=REPO, timeout=60,
    )
    assert r.returncode == 0
    assert len(r.stdout.splitlines()) == 5
    assert r.stderr == "", r.stderr

"""Running fuzz cases and judging them: in-process through ``cli.main.main`` (the function the
``specplan`` script calls) or as a real ``python -m cli`` subprocess, then the oracle.

The oracle (``judge``): exit code 0 or 2; no uncaught exception, no traceback, no "internal
error"; every error exactly one line that names the input (file or flag) and, when the case
knows which fields it changed (``Case.fields``), one of them; under 60 s.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz_cases import FUZZ_MAX_REQUEST_STEPS, REPO, Case, make_case

TIME_LIMIT_S = 60.0


@dataclass
class Outcome:
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    exception: str | None = None


# ------------------------------------------------------------------------- running


def materialize(case: Case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    for d in case.dirs:
        (folder / d).mkdir(exist_ok=True)


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def run_in_process(case: Case, folder: Path) -> Outcome:
    """``cli.main.main(argv)`` in ``folder`` with stdout/stderr captured; any exception that
    escapes main is recorded (it would be a traceback on the real command line)."""
    from cli.main import main

    materialize(case, folder)
    out, err = io.StringIO(), io.StringIO()
    old_cwd = os.getcwd()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT_S)
    t = time.perf_counter()
    rc: int | None = None
    exc_name = None
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(case.argv))
    except _Timeout:
        exc_name = "timeout"
    except SystemExit as exc:  # argparse: exit 2 with a usage line
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - the fuzz oracle counts every escape
        exc_name = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(old_cwd)
    return Outcome(rc, out.getvalue(), err.getvalue(), time.perf_counter() - t, exc_name)


def run_subprocess(case: Case, folder: Path) -> Outcome:
    materialize(case, folder)
    env = dict(os.environ, PYTHONPATH=str(REPO), SPECPLAN_MAX_REQUEST_STEPS=FUZZ_MAX_REQUEST_STEPS)
    t = time.perf_counter()
    try:
        argv = [a.encode("utf-8", "surrogateescape") if "\x00" not in a else a for a in case.argv]
        r = subprocess.run([sys.executable, "-m", "cli", *argv], cwd=folder, capture_output=True,
                           timeout=TIME_LIMIT_S, env=env)
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "", time.perf_counter() - t, "timeout")
    except ValueError as exc:  # an argv with a NUL byte cannot be passed to exec at all
        return Outcome(2, "", f"specplan: not runnable: {exc}", 0.0, None)
    return Outcome(r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"),
                   time.perf_counter() - t)


def _error_lines(stderr: str) -> list[str]:
    """Stderr without progress-bar residue (carriage-return redraws)."""
    return [ln for ln in stderr.splitlines() if ln.strip() and "\r" not in ln]


def judge(case: Case, o: Outcome) -> list[str]:
    """Failure classes of one outcome (empty: it passed the oracle)."""
    fails = []
    if o.exception == "timeout" or o.seconds > TIME_LIMIT_S:
        fails.append("over_60s")
    elif o.exception is not None:
        fails.append("uncaught_exception")
    if "Traceback (most recent call last)" in o.stderr:
        fails.append("traceback")
    if "internal error" in o.stderr:
        fails.append("internal_error")
    if o.rc not in (0, 2) and o.exception is None:
        fails.append("bad_exit_code")
    if o.rc == 2 and o.exception is None:
        lines = _error_lines(o.stderr)
        if not o.stderr.startswith("usage:"):
            if len(lines) != 1:
                fails.append("multi_line_error")
            elif case.names and not any(n in lines[0] for n in case.names if n):
                fails.append("error_not_naming_input")
            elif case.fields and not names_a_field(lines[0], case.fields):
                fails.append("error_not_naming_field")
        elif not any("error:" in ln for ln in lines):
            fails.append("usage_without_error")
    return fails


# refusals of a run's whole size (requests per run, request-steps): no one field is to blame,
# the message says what to shorten instead
_WHOLE_RUN_LIMITS = ("requests per run", "request-steps")


def names_a_field(line: str, fields: tuple[str, ...]) -> bool:
    """Does an error line name one of the mutated fields (its dotted path, or its last key:
    ``workload.segments[0].share`` or ``share``)? A refusal of the run's whole size passes."""
    if any(m in line for m in _WHOLE_RUN_LIMITS):
        return True
    for f in fields:
        keys = [k for k in re.split(r"[.\[\]]", f) if k and not k.isdigit()]
        if f in line or (keys and keys[-1] in line):
            return True
        # a renamed candidate, fleet or route is refused where it is referred to, by that field
        if keys and keys[-1] == "name" and any(r in line for r in _REFERRERS):
            return True
    return False


_REFERRERS = ("two_routes[", ".fleet", "speculative", "baseline", "idealised", "fallback")


@dataclass
class Tally:
    inputs: int = 0
    fails: Counter = field(default_factory=Counter)
    exit_codes: Counter = field(default_factory=Counter)
    examples: dict[str, tuple[Case, Outcome]] = field(default_factory=dict)
    slowest_s: float = 0.0

    def add(self, case: Case, o: Outcome) -> list[str]:
        self.inputs += 1
        self.exit_codes[o.rc] += 1
        self.slowest_s = max(self.slowest_s, o.seconds)
        f = judge(case, o)
        for name in f:
            self.fails[name] += 1
            self.examples.setdefault(f"{case.kind}:{name}", (case, o))
        return f

    def lines(self) -> list[str]:
        keys = ["uncaught_exception", "traceback", "internal_error", "bad_exit_code", "over_60s",
                "multi_line_error", "error_not_naming_input", "error_not_naming_field",
                "usage_without_error"]
        out = [f"inputs {self.inputs}", *(f"{k} {self.fails.get(k, 0)}" for k in keys),
               f"exit codes {dict(sorted(self.exit_codes.items(), key=str))}",
               f"slowest {self.slowest_s:.1f} s"]
        for key, (case, o) in sorted(self.examples.items()):
            msg = o.exception or (_error_lines(o.stderr) or [""])[-1]
            mutated = f" fields={list(case.fields)[:4]}" if case.fields else ""
            out.append(f"  e.g. {key}: argv={[a[:60] for a in case.argv]}{mutated} -> rc={o.rc} {msg[:300]!r}")
        return out


def fuzz(n: int, seed: int, folder: Path, *, subprocess_every: int = 0) -> tuple[Tally, Tally]:
    """Run ``n`` cases in-process (and every ``subprocess_every``-th also as a real CLI
    subprocess); return the two tallies."""
    old = os.environ.get("SPECPLAN_MAX_REQUEST_STEPS")
    os.environ["SPECPLAN_MAX_REQUEST_STEPS"] = FUZZ_MAX_REQUEST_STEPS
    rng = np.random.default_rng(seed)
    inproc, subproc = Tally(), Tally()
    pending = False
    try:
        for i in range(n):
            case = make_case(rng)
            d = folder / f"c{i}"
            inproc.add(case, run_in_process(case, d))
            pending = pending or bool(subprocess_every and i % subprocess_every == 0)
            # an argv with a NUL byte cannot reach a real process (exec refuses it): take the next
            if pending and not any("\x00" in a for a in case.argv):
                subproc.add(case, run_subprocess(case, folder / f"s{i}"))
                _cleanup(folder / f"s{i}")
                pending = False
            _cleanup(d)
    finally:
        if old is None:
            os.environ.pop("SPECPLAN_MAX_REQUEST_STEPS", None)
        else:
            os.environ["SPECPLAN_MAX_REQUEST_STEPS"] = old
    return inproc, subproc


def _cleanup(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)

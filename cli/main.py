"""`specplan` command line: parse arguments, call the library, turn input errors into exit 2.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; only the chosen one is imported, so `simulate` never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys

from sim.contracts.errors import SpecplanError

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("cli.simulate", "predict latency, goodput and cost for a scenario's candidates"),
    "breakeven": ("cli.breakeven", "break-even of speculative decoding from a profile or numbers"),
    "capacity": ("cli.capacity", "highest sustainable rate and fewest replicas per candidate"),
    "sweep": ("cli.sweep", "run a scenario over a grid of field values into one Parquet table"),
    "validate": ("cli.validate", "measure the simulator against real serving"),
    "calibrate": ("cli.calibrate", "fit a profile's free terms (acceptance, overheads) to your own measured runs"),
    "profile": ("cli.profile", "measure a calibration profile on this machine (needs torch)"),
    "dashboard": ("cli.dashboard", "open the what-if dashboard"),
    "report": ("cli.report", "write a self-contained HTML decision report"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {
        name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = _available()
    parser = argparse.ArgumentParser(
        prog="specplan",
        description="Capacity planner for LLM serving with speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        rc = int(args._run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return rc
    except SpecplanError as exc:
        print(f"specplan {args.command}: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"specplan {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _broken_pipe()
    except MemoryError:
        # the last resort behind the up-front floor (sim/contracts/memory_limits.py): one line, exit 2
        print(f"specplan {args.command}: error: out of memory (MemoryError) with {_available_mib()} "
              "available; shorten run.duration_s, lower the rate or run fewer seeds/candidates",
              file=sys.stderr)
        return 2
    except RecursionError as exc:
        # a limit the boundary checks (sim/contracts/input_limits.py) did not foresee: say so in one line
        print(f"specplan {args.command}: internal error: {type(exc).__name__} (input too large; "
              "please report it with the input)", file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 - the belt: one line, never a traceback
        if os.environ.get("SPECPLAN_TRACEBACK") or not _caught(exc):
            raise
        if type(exc).__name__ == "PanicException":  # pyo3 (polars), seen under memory pressure
            print(f"specplan {args.command}: error: a compiled library stopped (PanicException: "
                  f"{_one_line(str(exc))[:200]}), as it does when memory runs out; "
                  f"{_available_mib()} available; shorten run.duration_s, lower the rate or run "
                  "fewer seeds/candidates", file=sys.stderr)
            return 2
        where = _last_frame(exc)
        print(f"specplan {args.command}: internal error: {type(exc).__name__}: "
              f"{_one_line(str(exc))[:300]} at {where} (a bug: please report it with the input; "
              "SPECPLAN_TRACEBACK=1 shows the traceback)", file=sys.stderr)
        return 1


def _caught(exc: BaseException) -> bool:
    """Whether the belt turns ``exc`` into one line: every Exception, and pyo3's PanicException
    (a BaseException, so a Rust panic in polars is not mistaken for an exit request); never
    SystemExit or GeneratorExit."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _available_mib() -> str:
    """Memory still available, for the out-of-memory line (never raises)."""
    try:
        from sim.contracts.memory_limits import available_bytes

        free = available_bytes()
    except Exception:  # noqa: BLE001 - a message helper must not fail
        free = None
    return "an unknown amount of memory" if free is None else f"{free / 1024**2:,.0f} MiB of memory"


def _one_line(text: str) -> str:
    return " ".join(text.split()) if "\n" in text or "\r" in text else text


def _last_frame(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    return f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"


def _broken_pipe() -> int:
    """The reader (``head``, ``less``, ``grep -m1``) went away: stop quietly, as a Unix tool does.

    Python's own docs recipe: point stdout at devnull so the interpreter's final flush does not
    raise again, and exit with 128 + SIGPIPE.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    raise SystemExit(main())

"""`specplan dashboard`: serve the what-if dashboard (127.0.0.1 by default)."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.contracts.errors import SpecplanError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it)")
    parser.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    parser.add_argument("--root", type=Path, default=Path("."),
                        help="folder holding profiles/ and scenarios/ (default: the current folder)")
    parser.add_argument("--traces", type=Path, action="append", default=None,
                        help="folder an uploaded scenario may replay traces from (repeatable; "
                             "default ../shared/traces next to --root when it exists)")
    parser.add_argument("--no-background", action="store_true",
                        help="run simulations inside the request (no progress bar or cancel)")
    parser.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, dev tools)")


def run(args: argparse.Namespace) -> int:
    from dashboard.app import create_app
    from dashboard.files import Roots

    if not 0 < args.port < 65536:
        raise SpecplanError(f"--port: must be 1..65535, got {args.port}")
    root = args.root
    if not (root / "scenarios").is_dir() and not (root / "profiles").is_dir():
        raise SpecplanError(f"--root {root}: has neither scenarios/ nor profiles/; run from the "
                            "specplan checkout or pass --root")
    traces = tuple(args.traces) if args.traces else None
    app = create_app(Roots.under(root, traces), background=not args.no_background)
    print(f"specplan dashboard: http://{args.host}:{args.port}/  (Ctrl+C to stop)")
    app.run(host=args.host, port=args.port, debug=args.debug)
    return 0

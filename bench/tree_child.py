"""Run a snippet of Python in a checkout (its own venv when it has one) and read its last line as JSON.

Why: the ``--tree`` benches time the same case in this tree and another one; each child must
import only its own tree's code (``PYTHONPATH`` set to it, nothing else inherited).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def child_json(tree: Path, code: str, *args: str) -> dict:
    """The last stdout line of ``python -c code args...`` run in ``tree``, parsed as JSON."""
    py = tree / ".venv" / "bin" / "python"
    out = subprocess.run([str(py if py.exists() else sys.executable), "-c", code, *args],
                         cwd=tree, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])

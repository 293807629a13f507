"""Named seams into the compiled kernels, checked on the source text (ast), like the import rules.

A kernel that takes ``*args`` and unpacks them by hand (``ks.Replica(*a[0:13])``) hides which
array is which behind a count that breaks silently when a state object gains a field. Every
compiled function names its parameters; ``sim/model/kernels/kernel_entry.py`` takes one per state
object and rebuilds it whole (``ks.Replica(*rp)``), never a piece of one.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENTRY = REPO / "sim" / "model" / "kernels" / "kernel_entry.py"


def _is_njit(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("njit", "jit")


def compiled_functions(paths: list[Path]) -> list[tuple[Path, ast.FunctionDef]]:
    """Every function decorated with numba's ``njit``/``jit`` (or the kernel cache's) in ``paths``."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(_is_njit(d) for d in node.decorator_list):
                found.append((path, node))
    return found


def packed_unpacks(fn: ast.FunctionDef) -> list[str]:
    """Where ``fn`` takes a packed argument list or unpacks a positional piece of one: ``*args``,
    ``*a[i:j]``."""
    bad = []
    if fn.args.vararg is not None:
        bad.append(f"{fn.name}: takes *{fn.args.vararg.arg}")
    for node in ast.walk(fn):
        if isinstance(node, ast.Starred) and isinstance(node.value, ast.Subscript) \
                and isinstance(node.value.slice, ast.Slice):
            bad.append(f"{fn.name}:{node.lineno}: unpacks a slice ({ast.unparse(node)})")
    return bad


def entry_subscripts(fn: ast.FunctionDef) -> list[str]:
    """Parameters of an entry read by position (``a[23]``): a seam that has no name."""
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    return [f"{fn.name}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(fn)
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id in params]


def test_no_compiled_function_takes_or_unpacks_a_packed_argument_list() -> None:
    paths = sorted((REPO / "sim").rglob("*.py"))
    functions = compiled_functions(paths)
    assert len(functions) > 50, "the check found too few kernels: does it still see numba's decorators?"
    bad = [f"{path.relative_to(REPO)}: {b}" for path, fn in functions for b in packed_unpacks(fn)]
    assert not bad, "\n".join(bad)


def test_kernel_entries_take_each_state_object_by_name() -> None:
    entries = compiled_functions([ENTRY])
    assert len(entries) >= 6, f"kernel_entry.py: {len(entries)} compiled entries found"
    bad = [b for _, fn in entries for b in (*packed_unpacks(fn), *entry_subscripts(fn))]
    assert not bad, "kernel_entry.py:\n" + "\n".join(bad)


def test_the_seam_check_sees_a_positional_slice() -> None:
    """The old form (``def advance(*a): rk.advance(ks.Replica(*a[0:13]), a[23])``) is caught."""
    fn = ast.parse("@njit\ndef advance(*a):\n    return rk.advance(ks.Replica(*a[0:13]), a[23])\n").body[0]
    assert isinstance(fn, ast.FunctionDef) and _is_njit(fn.decorator_list[0])
    assert len(packed_unpacks(fn)) == 2
    named = ast.parse("def f(rp, pol):\n    return g(ks.Replica(*rp), pol[0])\n").body[0]
    assert isinstance(named, ast.FunctionDef)
    assert packed_unpacks(named) == [] and len(entry_subscripts(named)) == 1

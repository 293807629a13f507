"""Is every rule held by a test that names it? Seeded one-token mutations of a room's source, each
run against that room's focused tests, which must fail on every one.

Usage: ``python bench/mutate.py [--rooms decisions,results,profiler] [--seed 30] [--count 30]
[--timeout 300] [--pick 3,7] [--list]``. ``bench/mutate_kernels.py`` is this runner on the ``kernels`` (or
``fleet``) room. Each mutant is made in one copy of the tree (``git ls-files``) in a temporary
folder, so the checkout is never touched; numba compiles a mutated kernel afresh there (its
cache is keyed by the source). A room's tests run in order with ``-x``: the first failing test
kills the mutant and is printed by name, so a line says which rule caught it.

Mutation kinds (``KINDS``), at a site in a function's or class's code (never a module constant,
a signature, a docstring, a comment or a string):

- ``flip``: a comparison flipped (``<`` ↔ ``<=``, ``>`` ↔ ``>=``, ``==`` ↔ ``!=``);
- ``bump``: an integer literal moved by one (``0`` → ``1``, ``1`` → ``2``: off-by-one counts);
- ``float``: a float constant changed (``2.0`` → ``1.0``, ``0.5`` → ``1.0``, ``1.0`` → ``2.0``,
  others doubled): a factor in a formula;
- ``keyword``: a numeric keyword argument moved (``ddof=1`` → ``ddof=0``, ``0`` → ``1``, other
  values as above): a library call's convention;
- ``boolop``: ``and`` ↔ ``or`` (a compound condition);
- ``minmax``: ``min`` ↔ ``max`` (a clamp or a bound taken from the wrong side);
- ``not``: a ``not`` dropped (``if not x`` → ``if x``, ``is not`` → ``is``, ``not in`` → ``in``);
- ``slice``: a slice's named bound moved by one (``a[:n]`` → ``a[:n + 1]``, ``a[i:]`` →
  ``a[i + 1:]``; a numeric bound is ``bump``'s).

The draw takes ``--count`` mutants spread evenly over the rooms and, within a room, over the
kinds it has sites of (when a room's share is smaller than its kinds, which kinds get one is
drawn too), at random with ``--seed``. ``SKIP_SITES`` names the few sites whose every mutation is
proven equivalent, each with its reason. A mutant whose tests run past ``--timeout``
hangs, which counts as caught (CI's time limit would stop the suite). Prints one line per
mutant (site, mutation, ``caught by <test>`` or ``SURVIVED``) and a total; exits 1 when one
survived. Read a survivor as one of: an equivalent mutant (no input tells the two apart), an
unreachable branch, or a rule no test names yet (write the test). ``docs/contributing.md``.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOM_KINDS = ("flip", "bump", "float", "keyword", "boolop", "minmax", "not", "slice")


@dataclass(frozen=True)
class Room:
    """Source files mutated together and the focused tests that must catch them (rule-named,
    fastest first: ``-x`` stops at the first failure)."""

    targets: tuple[str, ...]
    tests: tuple[str, ...]
    kinds: tuple[str, ...] = ROOM_KINDS


ROOMS: dict[str, Room] = {
    "kernels": Room(
        ("sim/model/kernels/plan_kernels.py", "sim/model/kernels/apply_kernels.py", "sim/model/kernels/kv_blocks.py",
         "sim/model/kernels/queue_kernels.py"),
        ("tests/sim/model/test_scheduler.py", "tests/sim/model/test_batch_changes.py",
         "tests/sim/model/test_num_decoding_rule.py", "tests/sim/model/test_kv_ledger.py",
         "tests/sim/model/test_planner_oracle.py",
         "tests/sim/results/test_golden_frames.py"),
        kinds=("flip", "bump")),
    "fleet": Room(
        ("sim/model/kernels/fleet_kernels.py", "sim/model/kernels/fleet_clock.py",
         "sim/model/kernels/arrival_kernels.py", "sim/model/kernels/route_kernels.py"),
        ("tests/sim/model/test_route_rules.py", "tests/sim/model/test_lone_replica.py",
         "tests/sim/model/test_restart_compiled.py", "tests/sim/model/test_properties.py",
         "tests/sim/results/test_golden_frames.py"),
        kinds=("flip", "bump")),
    "clients": Room(
        ("sim/model/kernels/client_kernels.py",),
        ("tests/sim/model/test_client_kernel_rules.py", "tests/sim/model/test_clients.py"),
        kinds=("flip", "bump")),
    "decisions": Room(
        ("sim/decisions/paired.py", "sim/decisions/capacity_search.py", "sim/results/intervals.py"),
        ("tests/sim/decisions/test_paired_rules.py", "tests/sim/decisions/test_capacity_search_rules.py",
         "tests/sim/results/test_interval_clipping.py")),
    "sizing": Room(
        ("sim/decisions/carry.py", "sim/decisions/fleet_sizing.py"),
        ("tests/sim/decisions/test_carry_rules.py",)),
    "results": Room(
        ("sim/results/metrics.py", "sim/results/time_weighted.py", "sim/results/cost.py"),
        ("tests/sim/results/test_metric_rules.py", "tests/sim/results/test_metrics.py",
         "tests/sim/results/test_cost.py")),
    "profiler": Room(
        ("profiler/estimates/roofline.py", "profiler/estimates/estimate.py", "profiler/grids/timing_assembly.py"),
        ("tests/profiler/test_roofline_rules.py", "tests/profiler/test_timing_assembly_rules.py",
         "tests/profiler/test_estimate_rules.py", "tests/profiler/test_timing.py",
         "tests/profiler/test_estimate.py", "tests/profiler/test_estimate_roofline.py")),
}
OUTSIDE_KERNELS = ("decisions", "sizing", "results", "profiler")
BOOLOPS = {"and": "or", "or": "and"}
MINMAX = {"min": "max", "max": "min"}
FLIPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
BUMPS = {"1": "2", "0": "1"}
FLOATS = {"2.0": "1.0", "0.5": "1.0", "1.0": "2.0", "0.0": "1.0"}
KWARG_INTS = {"1": "0", "0": "1"}
SKIP_LINES = (".shape[0]", "G_COUNTER")
"""Kernel lines that check a log's room or number the emulated queue's events (any increasing
count orders them the same): not rules."""
SKIP_SITES: tuple[tuple[str, str], ...] = (
    # A fast path's guard: it picks between a lookup table over request ids and a join, which give
    # the same gaps for any ids (the table is sized by ``top``; the guard only keeps it small and
    # off negative ids, which request ids never are). Every mutation of these two lines either
    # keeps the same path or takes the other exact one: equivalent.
    ("sim/results/metrics.py", "top = int(max(ids.max(initial=-1), done.max(initial=-1)))"),
    ("sim/results/metrics.py", "if ids.size and min(ids.min(), done.min(initial=0)) >= 0 and top < 4 * (len(done) + len(ids)):"),
    # A search's upper end past the head count: a size t > heads never divides heads, so
    # ``heads + 2`` lists the same sizes as ``heads + 1``: equivalent.
    ("profiler/estimates/estimate.py", "heads + 1)"),
    ('profiler/estimates/estimate.py', 'arch["num_attention_heads"] + 1)'),
)
"""``(file, text)``: the sites inside ``text`` (a piece of one line) every mutation of which is
proven equivalent (the reason above each): the draw never picks them. Keep this list short and
reviewed; prefer removing the equivalent site from the code."""


def _float_change(text: str) -> str | None:
    if text in FLOATS:
        return FLOATS[text]
    try:
        value = float(text)
    except ValueError:
        return None
    if "j" in text.lower() or value == 0 or not any(c in text for c in ".eE"):
        return None
    return repr(value * 2)


def _keyword_change(text: str) -> str | None:
    if text in KWARG_INTS:
        return KWARG_INTS[text]
    if text.isdigit():
        return str(int(text) + 1)
    return _float_change(text)


def _skipped(path: Path, tok: tokenize.TokenInfo) -> bool:
    """A site on a ``SKIP_LINES`` line or inside a ``SKIP_SITES`` piece of its file."""
    if any(s in tok.line for s in SKIP_LINES):
        return True
    rel = path.resolve().relative_to(REPO).as_posix() if path.resolve().is_relative_to(REPO) else path.name
    col = tok.start[1]
    for f, text in SKIP_SITES:
        at = tok.line.find(text) if f == rel else -1
        while at >= 0:
            if at <= col < at + len(text):
                return True
            at = tok.line.find(text, at + 1)
    return False


def _slice_bound(toks: list[tokenize.TokenInfo], i: int, brackets: list[str]) -> int | None:
    """The index of a one-name slice bound next to the ``:`` at ``i`` (``a[:n]``, ``a[i:]``),
    else None."""
    if not brackets or brackets[-1] != "[" or toks[i].string != ":":
        return None
    nxt, prv = toks[i + 1:i + 3], toks[i - 2:i]
    if len(nxt) == 2 and nxt[0].type == tokenize.NAME and nxt[1].string in ("]", ",", ":"):
        return i + 1
    if len(prv) == 2 and prv[1].type == tokenize.NAME and prv[0].string in ("[", ",", ":"):
        return i - 1
    return None


def sites(path: Path, kinds: tuple[str, ...] = ROOM_KINDS) -> list[tuple[int, int, str, str, str]]:
    """Every ``(line, column, old, new, kind)`` a mutation of ``kinds`` can change in the code of
    the file's functions and classes (not module constants, signatures, docstrings, comments or
    strings)."""
    out = []
    toks = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    depth, indent, in_signature, brackets = 0, 0, False, []
    for i, tok in enumerate(toks):
        indent += (tok.type == tokenize.INDENT) - (tok.type == tokenize.DEDENT)
        if tok.type == tokenize.NAME and tok.string == "def":
            in_signature = True
        elif tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
            brackets.append(tok.string)
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
            brackets.pop()
        elif tok.type == tokenize.OP and tok.string == ":" and depth == 0:
            in_signature = False
        if in_signature or indent == 0 or _skipped(path, tok):
            continue
        b = _slice_bound(toks, i, brackets) if "slice" in kinds else None
        if b is not None:
            out.append((*toks[b].start, toks[b].string, f"{toks[b].string} + 1", "slice"))
        if tok.type == tokenize.OP and tok.string in FLIPS and "flip" in kinds:
            out.append((*tok.start, tok.string, FLIPS[tok.string], "flip"))
        elif tok.type == tokenize.NAME and tok.string in BOOLOPS and "boolop" in kinds:
            out.append((*tok.start, tok.string, BOOLOPS[tok.string], "boolop"))
        elif (tok.type == tokenize.NAME and tok.string in MINMAX and toks[i + 1].string == "("
              and toks[i - 1].string != "." and "minmax" in kinds):
            out.append((*tok.start, tok.string, MINMAX[tok.string], "minmax"))
        elif tok.type == tokenize.NAME and tok.string == "not" and "not" in kinds:
            end = toks[i + 1].start
            if end[0] == tok.start[0]:  # `not x` → `x` (the space after it too)
                out.append((*tok.start, tok.line[tok.start[1]:end[1]], "", "not"))
        elif tok.type != tokenize.NUMBER:
            continue
        elif (i >= 2 and depth > 0 and toks[i - 1].string == "=" and toks[i - 2].type == tokenize.NAME
              and "keyword" in kinds):
            new = _keyword_change(tok.string)
            if new is not None:
                out.append((*tok.start, tok.string, new, "keyword"))
        elif tok.string in BUMPS and "bump" in kinds:
            out.append((*tok.start, tok.string, BUMPS[tok.string], "bump"))
        elif "float" in kinds and (new := _float_change(tok.string)) is not None:
            out.append((*tok.start, tok.string, new, "float"))
    return out


def mutate(text: str, line: int, col: int, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    src = lines[line - 1]
    assert src[col:col + len(old)] == old, (line, col, old)
    lines[line - 1] = src[:col] + new + src[col + len(old):]
    return "".join(lines)


def draw(rooms: list[str], count: int, seed: int) -> list[tuple[str, str, int, int, str, str, str]]:
    """``count`` mutants ``(room, target, line, col, old, new, kind)``: an even share per room
    and, within a room, per kind it has sites of (a kind with too few sites gives its share to
    the others; the kinds that get one more are drawn)."""
    rng = random.Random(seed)
    chosen = []
    for r, name in enumerate(rooms):
        room = ROOMS[name]
        share = count // len(rooms) + (r < count % len(rooms))
        pools = {k: [(name, t, *s[:4], k) for t in room.targets for s in sites(REPO / t, room.kinds)
                     if s[4] == k] for k in room.kinds}
        pools = {k: p for k, p in pools.items() if p}
        order = sorted(pools)
        rng.shuffle(order)  # which kinds get the odd mutants when the share does not divide
        want = dict.fromkeys(order, 0)
        for _ in range(min(share, sum(map(len, pools.values())))):
            k = min((k for k in order if want[k] < len(pools[k])), key=lambda k: want[k])
            want[k] += 1
        for k in sorted(pools):
            chosen += rng.sample(pools[k], want[k])
    return chosen


def copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, dest / f)


def run_tests(tree: Path, tests: tuple[str, ...], timeout: int) -> tuple[bool, str]:
    """(caught, by what): the first failing test's id, a hang, or an error without a test."""
    present = [t for t in tests if (tree / t).is_file()]
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *present],
                             cwd=tree, capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ, SPECPLAN_NO_SHRINK="1", PYTHONPATH=str(tree)))
    except subprocess.TimeoutExpired:  # a mutant that never ends (a loop's exit broken)
        return True, f"hung over {timeout} s"
    failed = [ln.split()[1] for ln in res.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    if res.returncode == 0:
        return False, ""
    return True, failed[0] if failed else f"rc {res.returncode}"


def main(argv: list[str] | None = None, default_rooms: str = ",".join(OUTSIDE_KERNELS)) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rooms", default=default_rooms, help=f"comma-separated, of {', '.join(ROOMS)}")
    ap.add_argument("--seed", type=int, default=30)
    ap.add_argument("--count", type=int, default=30)
    ap.add_argument("--timeout", type=int, default=300,
                    help="seconds a mutant's tests may run; longer counts as caught (it hangs)")
    ap.add_argument("--pick", default="",
                    help="run only these numbers of the draw (e.g. 1,7: the survivors, after adding a test)")
    ap.add_argument("--list", action="store_true", help="print the sites per room and kind, run nothing")
    args = ap.parse_args(argv)
    rooms = [r.strip() for r in args.rooms.split(",") if r.strip()]
    unknown = [r for r in rooms if r not in ROOMS]
    if unknown or not rooms:
        ap.error(f"unknown room(s) {unknown}: choose from {', '.join(ROOMS)}")
    if args.list:
        for name in rooms:
            found = [s[4] for t in ROOMS[name].targets for s in sites(REPO / t, ROOMS[name].kinds)]
            print(name, {k: found.count(k) for k in ROOMS[name].kinds})
        return 0
    chosen = list(enumerate(draw(rooms, args.count, args.seed), 1))
    if args.pick:
        keep = {int(x) for x in args.pick.split(",")}
        chosen = [c for c in chosen if c[0] in keep]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="specplan-mutants-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        for i, (room, target, line, col, old, new, kind) in chosen:
            original = (tree / target).read_text()  # as copied: edits to the checkout meanwhile do not race
            (tree / target).write_text(mutate(original, line, col, old, new))
            t0 = time.perf_counter()
            try:
                caught, by = run_tests(tree, ROOMS[room].tests, args.timeout)
            finally:
                (tree / target).write_text(original)
            survived += not caught
            code = original.splitlines()[line - 1].strip()
            print(f"{i:2d}. [{room}/{kind}] {target}:{line}:{col} `{old}` -> `{new}` in `{code}`: "
                  f"{'caught by ' + by if caught else 'SURVIVED'} [{time.perf_counter() - t0:.0f} s]",
                  flush=True)
    print(f"{len(chosen) - survived}/{len(chosen)} mutants caught (seed {args.seed}, rooms {','.join(rooms)})")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())

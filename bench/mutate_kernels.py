"""Is every rule of the planner held by a test? Seeded one-character mutations of the planning and
apply kernels, each run against a focused subset of ``tests/sim``, which must fail on every one.

Usage: ``python bench/mutate_kernels.py [--seed 30] [--count 12] [--fleet] [--timeout 600]``.
This is ``bench/mutate.py`` (the one home of the mutation logic: sites, kinds, the copied tree,
the report) on the ``kernels`` room (``plan_kernels``, ``apply_kernels``, ``kv_blocks``,
``queue_kernels`` against the scheduler rule tests, the decode-batch changes, the
``num_decoding`` rule, the planner oracle and the golden frames) or, with ``--fleet``, the
``fleet`` room (``fleet_kernels``: restarts, ghosts; ``route_kernels``: routing, both drivers';
``arrival_kernels``: arrivals and deadlines, against the routing rule's oracle, the drivers-agree
properties, the restart equivalence tests and the golden frames). Mutations here are comparison flips and ±1 integer literals, as many of each.
(``SPECPLAN_NO_SHRINK=1``: a failing hypothesis example is reported as found, not shrunk.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutate import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    room = "fleet" if "--fleet" in argv else "kernels"
    argv = [a for a in argv if a != "--fleet"]
    defaults = [] if "--count" in argv else ["--count", "12"]
    timeout = [] if "--timeout" in argv else ["--timeout", "600"]
    sys.exit(main([*defaults, *timeout, *argv], default_rooms=room))

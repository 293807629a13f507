"""The step-time rules applied to a profile as it is imported: repaired, and the repair written down.

Why at import: an imported grid is another project's numbers composed per op, not a measurement
with noise, so a dip (batch 4 faster than batch 1, a 4-token verify below a 1-token decode) is a
defect of the composition, and the simulator would believe it at every step near it. The rules and
the repair live in ``sim.contracts.timing_sanity`` (one home); this module only records the
device's datasheet bandwidth, runs the repair on the profile's dict and says what changed in the
timing provenance's notes, so every result that uses the profile prints it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from profiler.estimates.gpu_specs import match_device_name
from sim.contracts.profile import Profile
from sim.contracts.timing_sanity import REPAIR_MARK, check, grids, profile_floor, repair


def sanitize(profile: dict[str, Any], origin: str = "import") -> list[str]:
    """Record the bandwidth, repair every grid in place, append the note; return the note's parts."""
    tprov = profile["timing"]["provenance"]
    dev = tprov.get("device")
    if dev is not None and dev.get("memory_bandwidth_bytes_per_s") is None:
        spec = match_device_name(str(dev.get("name", "")).replace("_", " "))
        if spec is not None:
            dev["memory_bandwidth_bytes_per_s"] = spec.memory_bandwidth
    loaded = Profile.from_dict(json.loads(json.dumps(profile)), origin)
    floor, skipped = profile_floor(loaded)
    found = check(loaded, 0.0, 0.0)
    for path, grid in grids(loaded.timing):
        fixed = repair(grid, path[-1], floor)
        if np.array_equal(fixed, grid.median, equal_nan=True):
            continue
        raw = profile["timing"]
        for key in path:
            raw = raw[key]
        order = [grid.axis_names.index(n) for n in raw["axes"]]  # back to the file's axis order
        out = np.transpose(fixed, order)
        raw["median"] = np.where(np.isnan(out), None, out).tolist()  # a null cell stays null
    parts = [f.line("repaired") for f in found.findings]
    head = ("timing sanity (docs/profile-format.md, \"Step-time sanity\"): "
            + (f"{REPAIR_MARK} (lifted to the bandwidth floor, then the running "
               "maximum along batch, tokens and k; for a MoE the running maximum of time less routed-expert "
               "reads, so more tokens cost at least their extra distinct experts at the bandwidth): " + " | ".join(parts) if parts
               else "every grid non-decreasing in tokens, verify >= decode")
            + (f"; bandwidth floor {found.floor.source}" if found.floor is not None else f"; {skipped}"))
    tprov["notes"] = f"{tprov['notes']}; {head}" if tprov.get("notes") else head
    return parts

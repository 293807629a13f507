"""What one live validation runs, as the CLI parsed and checked it.

Why apart from ``live_validation``: the load points (``live_points``) are computed from these
settings, and the orchestration runs them; both read the settings, neither owns them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.fidelity import live_load


@dataclass(frozen=True)
class LiveValidation:
    """What one live validation runs: parsed and checked by the CLI."""

    scenario_path: str
    scenario: Scenario
    profile: Profile
    loads: tuple[float, ...]
    candidates: tuple[str, ...]
    capacities: dict[str, live_load.CapacityEstimate]
    """Per candidate, the capacity its loads are fractions of."""
    load_basis: str = "own"
    """``own``, ``baseline`` (see ``sim.fidelity.live_load.LOAD_BASES``) or ``given`` (--capacity)."""
    requests: int = 60
    seed: int = 0
    sim_reps: int = 5
    real_reps: int = 1
    model: str | None = None
    """``load_model`` spec; None: the profile's target."""
    device: str = "cpu"
    threads: int | None = None
    max_wall_s: float | None = None
    """Abort a real run after this long; None: 4 × its arrival span + 120 s."""
    command: str | None = None
    notes: tuple[str, ...] = ()
    """Notes for the report from the caller (e.g. the KV layout the scenario was run with)."""
    drift_correct: bool = False
    """Predict each real run with the profile's step times × the machine's speed during it
    (``sim/model/machine_speed.py``: decode parts by the decode cells', prefill parts by the prefill
    cells' now/profile ratio, from the checks around the run and its idle-gap probes); the raw
    profile's bar is reported beside it."""
    idle_probes: bool = True
    """Time one reference cell in the real runs' idle gaps (``profiler/live/idle_probes.py``): the
    machine's speed during each run, the in-run knots of ``--drift-correct``'s timeline."""
    checkpoints: Path | None = None
    """Folder where every finished real run is checkpointed (``profiler/live/live_checkpoints.py``)."""
    resume: bool = False
    """Reuse the runs checkpointed there by an interrupted validation of the same arguments."""

"""Checkpoints of ``specplan validate``'s real runs, so an interrupted validation loses nothing.

Why: a real run on a CPU takes minutes and cannot be reproduced exactly (the machine's speed
moves). Every finished real run is written to ``OUT/checkpoints/`` as it finishes — its frames
as Parquet, then a ``.run.json`` marker naming them, each file whole or not at all
(``sim.results.atomic_io``), so a run killed mid-write has no marker and is served again. The
drift check that follows a run (its "after", for ``--drift-correct``) is added as a separate
``.after.json``. ``manifest.json`` holds every argument the real runs depend on; ``--resume``
reuses the runs of the same arguments and refuses checkpoints of different ones, naming what
differs. The arguments that only change the prediction (``--sim-reps``, ``--drift-correct``)
and the number of real runs per point (``--reps``: runs are keyed by their index) are left out,
so a rerun may change them and still reuse what was served.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sim.contracts.errors import SpecplanError
from sim.decisions.sweep import content_digest
from sim.model.machine_speed import SpeedSample
from sim.model.step_time import StepShape
from sim.results.atomic_io import ensure_dir, write_parquet_atomic, write_text_atomic

MANIFEST = "manifest.json"
VERSION = 1
"""Bumped when a checkpoint's layout changes: older checkpoints then count as different."""
FRAMES = ("requests", "steps", "probes")


@dataclass
class RunRecord:
    """One finished real run: what the report needs from it, nothing that must be served again."""

    load: float
    candidate: str
    rate: float
    rep: int
    measured: dict[str, float | None]
    """The compared numbers of the run (request metrics and measured step-time percentiles)."""
    shapes: tuple[StepShape, ...]
    wall_s: float
    aborted: bool
    before: dict[str, Any]
    """The drift check just before the run (``sim.fidelity.drift.drift_summary``)."""
    requests: pl.DataFrame
    """Per-request records, tagged with load, rate and real_run."""
    steps: pl.DataFrame
    """Per-step records with the shapes and the profile's time, tagged likewise."""
    probes: pl.DataFrame | None
    """Reference passes timed in the run's idle gaps (None: ``--no-idle-probes``)."""
    after: dict[str, Any] | None = None
    """The drift check after the run (None until it is done)."""

    @property
    def key(self) -> tuple[float, str]:
        return self.load, self.candidate

    @property
    def label(self) -> str:
        return f"{self.candidate} at {self.load:.0%}, real run {self.rep + 1}"

    @property
    def durations(self) -> list[float]:
        return self.steps["duration_s"].to_list()

    @property
    def samples(self) -> list[SpeedSample]:
        if self.probes is None:
            return []
        return [SpeedSample(t, k, r) for t, k, r in self.probes.select("t_s", "kind", "ratio").iter_rows()]


def run_key(load: float, candidate: str, rate: float, rep: int) -> str:
    return content_digest(VERSION, load, candidate, rate, rep)[:20]


def _same(d: Mapping[str, Any]) -> str:
    """What must match (a moved scenario or profile file of the same content still does)."""
    return content_digest({k: x for k, x in d.items() if not k.endswith("_path")})


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    new = json.loads(json.dumps(new, default=str))  # compared as the manifest stores it
    keys = [k for k in dict.fromkeys([*old, *new]) if not k.endswith("_path") and old.get(k) != new.get(k)]
    return ", ".join(f"{k} {old.get(k)!r} → {new.get(k)!r}" for k in keys[:4]) + (" …" if len(keys) > 4 else "")


class RunStore:
    """The checkpoint folder of one validation (``arguments``: what its real runs depend on)."""

    def __init__(self, folder: Path, arguments: Mapping[str, Any], *, resume: bool) -> None:
        self.folder = Path(folder)
        self.arguments = {"version": VERSION, **arguments}
        self.resume = resume

    def _path(self, rec_key: str, part: str) -> Path:
        return self.folder / f"{rec_key}.{part}"

    def open(self) -> dict[str, RunRecord]:
        """The reusable runs by key (empty without ``resume``); refuses, in one line, checkpoints
        of other arguments, and finished ones without ``resume``; then writes the manifest."""
        markers = sorted(self.folder.glob("*.run.json")) if self.folder.is_dir() else []
        man = self.folder / MANIFEST
        if markers:
            try:
                old = json.loads(man.read_text(encoding="utf-8"))["arguments"]
            except (OSError, ValueError, KeyError, TypeError):
                old = None
            if old is None:
                raise SpecplanError(f"{self.folder}: {len(markers)} checkpointed real runs without a readable "
                                    f"{MANIFEST}; remove the folder to start over, or choose another --out")
            if _same(old) != _same(self.arguments):
                raise SpecplanError(f"{self.folder}: {len(markers)} checkpointed real runs of a different "
                                    f"validation ({_differences(old, self.arguments)}); remove the folder to "
                                    f"start over, or choose another --out")
            if not self.resume:
                raise SpecplanError(f"{self.folder}: {len(markers)} finished real runs of this validation are "
                                    f"there; pass --resume to keep them, or remove the folder to start over")
        ensure_dir(self.folder, "checkpoint folder")
        write_text_atomic(man, json.dumps({"arguments": self.arguments}, indent=1, default=str))
        found = (self._load(m) for m in markers)
        return {k: r for k, r in found if r is not None}

    def _load(self, marker: Path) -> tuple[str, RunRecord | None]:
        key = marker.name.removesuffix(".run.json")
        try:
            d = json.loads(marker.read_text(encoding="utf-8"))
            frames = {n: pl.read_parquet(self._path(key, f"{n}.parquet")) for n in FRAMES if n in d["frames"]}
            after = self._path(key, "after.json")
            rec = RunRecord(
                float(d["load"]), str(d["candidate"]), float(d["rate"]), int(d["rep"]), dict(d["measured"]),
                tuple(StepShape(**s) for s in d["shapes"]), float(d["wall_s"]), bool(d["aborted"]),
                dict(d["before"]), frames["requests"], frames["steps"], frames.get("probes"),
                json.loads(after.read_text(encoding="utf-8")) if after.is_file() else None)
        except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
            return key, None  # unreadable: that run is served again (its files are overwritten)
        return key, rec

    def save(self, rec: RunRecord) -> None:
        """The run's frames, then its marker: a run is finished once its marker is there."""
        key = run_key(rec.load, rec.candidate, rec.rate, rec.rep)
        frames = {"requests": rec.requests, "steps": rec.steps, "probes": rec.probes}
        for name, frame in frames.items():
            if frame is not None:
                write_parquet_atomic(frame, self._path(key, f"{name}.parquet"))
        self._path(key, "after.json").unlink(missing_ok=True)
        write_text_atomic(self._path(key, "run.json"), json.dumps({
            "load": rec.load, "candidate": rec.candidate, "rate": rec.rate, "rep": rec.rep,
            "measured": rec.measured, "shapes": [dataclasses.asdict(s) for s in rec.shapes],
            "wall_s": rec.wall_s, "aborted": rec.aborted, "before": rec.before,
            "frames": [n for n, f in frames.items() if f is not None]}, default=str))

    def save_after(self, rec: RunRecord) -> None:
        key = run_key(rec.load, rec.candidate, rec.rate, rec.rep)
        write_text_atomic(self._path(key, "after.json"), json.dumps(rec.after, default=str))


__all__ = ["MANIFEST", "RunRecord", "RunStore", "run_key"]

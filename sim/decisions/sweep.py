"""Sweeps: a scenario over a grid of field values, one cell per combination, run on a pool.

A cell is a set of ``with_overrides`` paths → values. Each cell runs as one pure function call
(``payload, overrides -> polars frame``) on an engine: a Dask cluster (a ``LocalCluster`` of
processes by default, or an existing scheduler by address: the same code path on one machine
or many), a plain ``concurrent.futures`` process pool, or in-process (``serial``, for tests and
debugging). The parent writes each finished cell atomically to ``<out>.cells/<key>.parquet``;
the key hashes the cell's overrides with the scenario's and profile's content, so an
interrupted sweep keeps every finished cell and ``resume`` skips exactly those. At the end the
cells of this grid are consolidated, in grid order, into one tidy Parquet table. The grid
itself (parsing ``--vary``, cells, keys) is ``sweep_grid``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from sim.contracts.errors import SpecplanError
from sim.decisions.sweep_grid import (
    Vary,
    cell_key,
    content_digest,
    expand_grid,
    scenario_overrides,
)

Engine = Literal["dask", "processes", "serial"]
ENGINES: tuple[str, ...] = ("dask", "processes", "serial")
CellFn = Callable[[Any, Mapping[str, Any]], pl.DataFrame]


# ---------------------------------------------------------------------------------------------
# The engine


@dataclass(frozen=True)
class SweepOutcome:
    """What one run of the engine did: cells computed now, cells found finished, the frame."""

    computed: int
    skipped: int
    frame: pl.DataFrame
    out: Path | None


def _write_atomic(df: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        df.write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_WORKER_PAYLOAD: Any = None


def _init_worker(payload: Any) -> None:
    """Process-pool initializer: receive the shared payload once per worker process."""
    global _WORKER_PAYLOAD
    _WORKER_PAYLOAD = payload


def _call_with_worker_payload(fn: CellFn, cell: Mapping[str, Any]) -> pl.DataFrame:
    return fn(_WORKER_PAYLOAD, cell)


def _lit(v: Any) -> pl.Expr:
    """A cell value as a column literal: whole numbers as Int64 (polars would pick Int32)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return pl.lit(v, dtype=pl.Int64)
    return pl.lit(v)


def _describe(cell: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.items())


def run_cells(
    cells: Sequence[Mapping[str, Any]],
    fn: CellFn,
    payload: Any,
    *,
    cells_dir: Path,
    base_digest: str,
    engine: Engine = "dask",
    workers: int | None = None,
    cluster: str | None = None,
    processes: bool = True,
    resume: bool = False,
    progress: bool = True,
    connect_timeout_s: float = 10.0,
) -> tuple[int, int]:
    """Run every unfinished cell; write each result as it completes. Returns (computed, skipped).

    ``fn(payload, cell)`` must be a picklable top-level function; ``payload`` (scenario and
    profile) is shipped once per worker. The frame a cell returns is stored with the cell's
    values as leading columns and its key in ``cell``. A failing cell does not stop the cells
    already running; the first failure is re-raised after they finish, naming the cell.
    """
    if engine not in ENGINES:
        raise SpecplanError(f"--engine: must be one of {', '.join(ENGINES)}, got {engine!r}")
    keys = [cell_key(base_digest, c) for c in cells]
    if len(set(keys)) != len(keys):
        raise SpecplanError("--vary: two cells are identical; remove repeated values")
    existing = {p.stem for p in cells_dir.glob("*.parquet")} if cells_dir.exists() else set()
    finished = [k for k in keys if k in existing]
    if finished and not resume:
        raise SpecplanError(f"{cells_dir}: {len(finished)} finished cells of this sweep are "
                            f"there; pass --resume to keep them, or remove the folder to start over")
    todo = [(k, c) for k, c in zip(keys, cells, strict=True) if k not in existing]
    cells_dir.mkdir(parents=True, exist_ok=True)
    workers = max(1, int(workers or os.cpu_count() or 1))

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), unit="cell", desc="sweep")

    def store(key: str, cell: Mapping[str, Any], df: pl.DataFrame) -> None:
        lead = [_lit(v).alias(k) for k, v in cell.items()] + [pl.lit(key).alias("cell")]
        _write_atomic(df.select(lead + [pl.col(c) for c in df.columns if c not in cell]),
                      cells_dir / f"{key}.parquet")
        if bar is not None:
            bar.update(1)

    try:
        if engine == "serial":
            for key, cell in todo:
                try:
                    df = fn(payload, cell)
                except SpecplanError:
                    raise
                except Exception as exc:
                    raise RuntimeError(f"sweep cell {_describe(cell)} failed: {exc}") from exc
                store(key, cell, df)
        elif engine == "processes":
            _run_process_pool(todo, fn, payload, workers, store)
        else:
            _run_dask(todo, fn, payload, workers, cluster, processes, store, connect_timeout_s)
    finally:
        if bar is not None:
            bar.close()
    return len(todo), len(cells) - len(todo)


def _first_error(errors: list[tuple[Mapping[str, Any], BaseException]]) -> None:
    if not errors:
        return
    cell, exc = errors[0]
    if isinstance(exc, SpecplanError):
        raise exc
    more = f" (and {len(errors) - 1} more cells)" if len(errors) > 1 else ""
    raise RuntimeError(f"sweep cell {_describe(cell)} failed{more}: {exc!r}") from exc


def _gather(done: Iterable[Any], futs: Mapping[Any, tuple[str, Mapping[str, Any]]],
            store: Callable[[str, Mapping[str, Any], pl.DataFrame], None],
            errors: list[tuple[Mapping[str, Any], BaseException]], *, release: bool = False) -> None:
    """Store each finished cell as it completes (either engine's futures); keep its error
    instead when it failed, so every other cell is still kept."""
    for fut in done:
        key, cell = futs[fut]
        try:
            df = fut.result()
        except Exception as exc:
            errors.append((cell, exc))
            continue
        store(key, cell, df)
        if release:
            fut.release()

def _run_process_pool(todo: list[tuple[str, Mapping[str, Any]]], fn: CellFn, payload: Any,
                      workers: int, store: Callable[..., None]) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    errors: list[tuple[Mapping[str, Any], BaseException]] = []
    ctx = mp.get_context("spawn")  # no fork of a parent holding threads (polars, tqdm)
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(payload,)) as pool:
        futs = {pool.submit(_call_with_worker_payload, fn, cell): (key, cell) for key, cell in todo}
        _gather(as_completed(futs), futs, store, errors)
    _first_error(errors)


def _run_dask(todo: list[tuple[str, Mapping[str, Any]]], fn: CellFn, payload: Any, workers: int,
              cluster: str | None, processes: bool, store: Callable[..., None],
              connect_timeout_s: float = 10.0) -> None:
    import logging

    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover - dask is in requirements.txt
        raise SpecplanError("--engine dask: dask[distributed] is not installed; "
                            "use --engine processes or pip install 'dask[distributed]'") from exc

    local = None
    if cluster:
        try:
            client = Client(cluster, timeout=f"{connect_timeout_s}s")
        except OSError as exc:
            raise SpecplanError(f"--cluster {cluster}: no Dask scheduler answered ({exc}); "
                                f"give tcp://HOST:PORT of a running dask scheduler") from exc
    else:
        logging.getLogger("distributed").setLevel(logging.ERROR)
        local = LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                             dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(local)
    errors: list[tuple[Mapping[str, Any], BaseException]] = []
    try:
        shared = client.scatter(payload, broadcast=True)
        futs = {}
        for key, cell in todo:
            f = client.submit(fn, shared, dict(cell), key=f"specplan-cell-{key}", pure=False)
            futs[f] = (key, cell)
        _gather(as_completed(list(futs)), futs, store, errors, release=True)
    finally:
        client.close()
        if local is not None:
            local.close()
    _first_error(errors)


def consolidate(cells: Sequence[Mapping[str, Any]], base_digest: str, cells_dir: Path,
                out: Path | None) -> pl.DataFrame:
    """One frame of this grid's cells in grid order; written atomically to ``out`` if given."""
    frames = []
    for c in cells:
        p = cells_dir / f"{cell_key(base_digest, c)}.parquet"
        if not p.exists():
            raise RuntimeError(f"sweep: cell {_describe(c)} has no result at {p}")
        frames.append(pl.read_parquet(p))
    df = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    if out is not None:
        _write_atomic(df, out)
    return df


# ---------------------------------------------------------------------------------------------
# Sweeping a scenario through the simulator


def simulate_cell(payload: tuple[Any, Any, bool], cell: Mapping[str, Any]) -> pl.DataFrame:
    """One cell: the scenario with the cell's overrides, all its candidates → summary rows, each
    with the cell's decision (``sim.decisions.decision``, over the cell's seeds: its outcome,
    winner and headline), so the sweep's verdict renders what was decided, never re-decides."""
    from sim.decisions.answer import answer_of, device_of
    from sim.decisions.answer_text import headline
    from sim.results.runner import resolve_profile, run_scenario

    scenario, profile, all_segments = payload
    sc = scenario.with_overrides(scenario_overrides(cell))
    prof = resolve_profile(sc, profile)
    result = run_scenario(sc, profile=prof)
    summary = result.summary
    if len(result.candidates) > 1:
        d = answer_of(result, device=device_of(prof, sc)).whole
        summary = summary.with_columns(pl.lit(d.outcome).alias("decision_outcome"),
                                       pl.lit(d.winner, dtype=pl.String).alias("decision_winner"),
                                       pl.lit(headline(d)).alias("decision_headline"))
    if not all_segments and "segment" in summary.columns:
        summary = summary.filter(pl.col("segment") == "all")
    return summary


def scenario_digest(scenario: Any, profile: Any | None = None) -> str:
    """Digest of what a cell's result depends on besides its overrides."""
    parts: list[Any] = [scenario.to_dict()]
    prof_path = scenario.profile_path
    if prof_path is not None and prof_path.is_file():
        parts.append(hashlib.sha256(prof_path.read_bytes()).hexdigest())
    elif profile is not None:
        parts.append(getattr(profile, "name", ""))
    import sim

    parts.append(getattr(sim, "__version__", ""))
    return content_digest(*parts)


def cells_dir_for(out: Path) -> Path:
    """``sweep.parquet`` → ``sweep.parquet.cells/``."""
    return out.with_name(out.name + ".cells")


def sweep(
    scenario: Any,
    varies: Sequence[Vary],
    out: Path,
    *,
    profile: Any = None,
    engine: Engine = "dask",
    workers: int | None = None,
    cluster: str | None = None,
    resume: bool = False,
    all_segments: bool = False,
    progress: bool = True,
    processes: bool = True,
    fn: CellFn = simulate_cell,
) -> SweepOutcome:
    """Run ``scenario`` over the grid of ``varies``; one row per cell × candidate in ``out``.

    Every cell's overrides are applied in the parent first, so a bad path or value fails before
    any work starts (with the scenario's own one-line error).
    """
    from sim.results.runner import resolve_profile

    profile = resolve_profile(scenario, profile)
    cells = expand_grid(varies)
    for c in cells:
        scenario.with_overrides(scenario_overrides(c))  # validates; raises SpecplanError
    digest = scenario_digest(scenario, profile)
    cdir = cells_dir_for(out)
    computed, skipped = run_cells(cells, fn, (scenario, profile, all_segments), cells_dir=cdir,
                                  base_digest=digest, engine=engine, workers=workers,
                                  cluster=cluster, processes=processes, resume=resume,
                                  progress=progress)
    frame = consolidate(cells, digest, cdir, out)
    return SweepOutcome(computed, skipped, frame, out)

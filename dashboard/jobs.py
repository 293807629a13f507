"""How the dashboard's background simulations start: in a spawned interpreter, never a fork.

Dash's ``DiskcacheManager`` forks the web server for each job. Any fork of a process that has
threads copies their locks but not the threads: importing polars alone starts three threads
(its runtime and allocator), so a forked job could wait forever on a lock a vanished thread
held — a hang that showed up once in two fresh-clone test runs as "waiting for first run".
A fork server does not help, since it imports polars too before it forks.

``WarmSpawnManager`` instead hands each job to a *spare*: a process started with ``spawn``
(a fresh interpreter, no inherited threads) that has already imported the dashboard and waits
on a pipe, its simulator kernels loaded. The job runs there, and a new spare is started for the next one, so a what-if pays
no interpreter start-up when the previous spare is ready. Cancel kills the spare that runs the
job, as Dash does with its own processes (by pid).
"""

from __future__ import annotations

import threading
from typing import Any

from dash import DiskcacheManager

PRELOAD = ("dashboard.callbacks",)
"""Imported by each spare before it waits, so a job starts with polars, Dash and sim loaded."""


def _spare_main(conn: Any, preload: tuple[str, ...]) -> None:
    """A spare's whole life: import, load the simulator's kernels, wait for one job (or the pipe
    closing), run it, exit."""
    import importlib

    for name in preload:
        importlib.import_module(name)
    warm_kernels()
    try:
        job_fn, args = conn.recv()
    except (EOFError, OSError):  # the app went away before giving this spare a job
        return
    finally:
        conn.close()
    job_fn(*args)


def warm_kernels() -> None:
    """Load the compiled planner from numba's cache by running two tiny fleets (~1 s in a new
    interpreter, which a what-if would otherwise wait for); nothing when numba is missing."""
    try:
        from sim.model.drivers import warm_kernels as warming
    except ImportError:  # the Python engine needs no warming
        return
    warming.warm()


class WarmSpawnManager(DiskcacheManager):
    """A ``DiskcacheManager`` whose jobs run in pre-started spawned spares (see module doc)."""

    def __init__(self, cache: Any, preload: tuple[str, ...] = PRELOAD, **kwargs: Any) -> None:
        super().__init__(cache, **kwargs)
        from multiprocess import get_context

        self._mp = get_context("spawn")
        self._preload = tuple(preload)
        self._lock = threading.Lock()  # callbacks arrive on the server's request threads
        self._spare: tuple[Any, Any] | None = None
        self._start_spare()

    def _start_spare(self) -> None:
        reader, writer = self._mp.Pipe(duplex=False)
        # daemon: the interpreter ends spares that are still waiting when the server exits
        proc = self._mp.Process(target=_spare_main, args=(reader, self._preload), daemon=True)
        proc.start()
        reader.close()  # the spare holds its own copy; ours would keep its pipe from closing
        self._spare = (proc, writer)

    def call_job_fn(self, key: Any, job_fn: Any, args: Any, context: Any) -> int:
        with self._lock:
            proc, conn = self._spare if self._spare is not None else (None, None)
            if proc is None or not proc.is_alive():
                self._start_spare()
                proc, conn = self._spare  # type: ignore[misc]
            self._spare = None
            conn.send((job_fn, (key, self._make_progress_key(key), args, context)))
            conn.close()
            self._start_spare()
            return proc.pid

    def close(self) -> None:
        """End the waiting spare (tests and benchmarks that build many apps call this)."""
        with self._lock:
            if self._spare is not None:
                proc, conn = self._spare
                conn.close()
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                self._spare = None

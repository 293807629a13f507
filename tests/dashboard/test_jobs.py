"""Background jobs start in a spawned spare, never a fork of the (threaded) server process."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("diskcache")
pytest.importorskip("multiprocess")

SENTINEL = {"set_in_parent": False}


def record_job(key, progress_key, args, context) -> None:
    """What Dash's job function receives; writes what the job process saw."""
    out = Path(args["out"])
    out.write_text(json.dumps({
        "sentinel": SENTINEL["set_in_parent"],
        "preloaded": "dashboard.callbacks" in sys.modules,
        "key": key,
    }), encoding="utf-8")


def wait_file(path: Path, timeout: float = 60.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and path.stat().st_size:
            return json.loads(path.read_text(encoding="utf-8"))
        time.sleep(0.1)
    raise AssertionError(f"job never wrote {path}")


def test_jobs_run_in_spawned_preloaded_spares_and_each_gets_a_new_one(tmp_path):
    import diskcache

    from dashboard.jobs import WarmSpawnManager

    manager = WarmSpawnManager(diskcache.Cache(str(tmp_path / "cache")))
    try:
        SENTINEL["set_in_parent"] = True  # a forked child would inherit this; a spawned one cannot
        pids = []
        for i in range(2):
            out = tmp_path / f"job{i}.json"
            pids.append(manager.call_job_fn(f"k{i}", record_job, {"out": str(out)}, {}))
            seen = wait_file(out)
            assert seen == {"sentinel": False, "preloaded": True, "key": f"k{i}"}
        assert pids[0] != pids[1]  # one spare per job
    finally:
        SENTINEL["set_in_parent"] = False
        manager.close()


def test_a_cancelled_job_is_killed_by_pid(tmp_path):
    import diskcache
    import psutil

    from dashboard.jobs import WarmSpawnManager

    manager = WarmSpawnManager(diskcache.Cache(str(tmp_path / "cache")))
    try:
        pid = manager.call_job_fn("slow", sleep_job, {"s": 60}, {})
        assert manager.job_running(pid)
        manager.terminate_job(pid)
        end = time.monotonic() + 10
        while manager.job_running(pid) and time.monotonic() < end:
            time.sleep(0.1)
        assert not manager.job_running(pid)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        manager.close()


def sleep_job(key, progress_key, args, context) -> None:
    time.sleep(args["s"])

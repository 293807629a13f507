"""Sweep grid, cell keys, engines (serial, process pool, Dask LocalCluster) and resume."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from sim.contracts.errors import SpecplanError
from sim.decisions.sweep import cells_dir_for, consolidate, run_cells
from sim.decisions.sweep_grid import (
    Vary,
    cell_key,
    describe_grid,
    expand_grid,
    parse_vary,
    scenario_overrides,
)


def toy_cell(payload: dict, cell: dict) -> pl.DataFrame:
    """A pure cell function: two 'candidates' whose metric is a closed form of the cell."""
    rate = float(cell["workload.rate"])
    k = int(cell.get("k", 0))
    return pl.DataFrame({
        "candidate": ["baseline", "spec"],
        "metric": [payload["scale"] * rate, payload["scale"] * rate / (1 + k)],
    })


def failing_cell(payload: dict, cell: dict) -> pl.DataFrame:
    if cell["workload.rate"] == 3:
        raise ValueError("boom at rate 3")
    return toy_cell(payload, cell)


class CountingFn:
    """Counts calls; raises on call number ``fail_at`` (1-based) to simulate an interruption."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[dict] = []
        self.fail_at = fail_at

    def __call__(self, payload: dict, cell: dict) -> pl.DataFrame:
        self.calls.append(dict(cell))
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            raise KeyboardInterrupt  # what Ctrl-C looks like mid-sweep
        return toy_cell(payload, cell)


GRID = [Vary("workload.rate", (1, 2, 3)), Vary("k", (0, 1, 3))]


def test_parse_vary_types_and_brackets() -> None:
    v = parse_vary("candidates[ngram-k3].k=1,2,4")
    assert v.key == "candidates[ngram-k3].k" and v.values == (1, 2, 4)
    assert parse_vary("workload.rate=1,2.5").values == (1.0, 2.5)
    assert parse_vary("candidates[x].policy=fixed,adaptive").values == ("fixed", "adaptive")
    assert parse_vary("fleet.engine.chunked_prefill=true,false").values == (True, False)
    with pytest.raises(SpecplanError, match="key=v1"):
        parse_vary("workload.rate")
    with pytest.raises(SpecplanError, match="repeat"):
        parse_vary("workload.rate=1,1")
    with pytest.raises(SpecplanError, match="no values"):
        parse_vary("workload.rate=")


def test_grid_order_and_seed_alias() -> None:
    cells = expand_grid(GRID)
    assert len(cells) == 9
    assert cells[0] == {"workload.rate": 1, "k": 0} and cells[1] == {"workload.rate": 1, "k": 1}
    assert describe_grid(GRID) == "workload.rate(3) × k(3) = 9 cells"
    assert scenario_overrides({"seed": 4, "workload.rate": 2}) == {"run.seeds": [4], "workload.rate": 2}
    assert scenario_overrides({"run.seeds": 5}) == {"run.seeds": [5]}
    with pytest.raises(SpecplanError, match="twice"):
        expand_grid([Vary("a", (1,)), Vary("a", (2,))])


def test_cell_key_depends_on_values_and_base() -> None:
    a = cell_key("base1", {"workload.rate": 1})
    assert a == cell_key("base1", {"workload.rate": 1})
    assert a != cell_key("base1", {"workload.rate": 2})
    assert a != cell_key("base2", {"workload.rate": 1})
    assert Path(a).name == a  # usable as a file name


def _expected() -> pl.DataFrame:
    rows = []
    for c in expand_grid(GRID):
        df = toy_cell({"scale": 2.0}, c)
        for cand, m in zip(df["candidate"], df["metric"], strict=True):
            rows.append({"workload.rate": c["workload.rate"], "k": c["k"], "candidate": cand, "metric": m})
    return pl.DataFrame(rows)


def _run(tmp_path: Path, fn, engine: str = "serial", resume: bool = False, **kw) -> tuple[int, int]:
    return run_cells(expand_grid(GRID), fn, {"scale": 2.0}, cells_dir=cells_dir_for(tmp_path / "s.parquet"),
                     base_digest="d", engine=engine, resume=resume, progress=False, **kw)


def _consolidated(tmp_path: Path) -> pl.DataFrame:
    out = tmp_path / "s.parquet"
    df = consolidate(expand_grid(GRID), "d", cells_dir_for(out), out)
    assert pl.read_parquet(out).equals(df)
    return df


def test_serial_engine_tidy_table(tmp_path: Path) -> None:
    assert _run(tmp_path, toy_cell) == (9, 0)
    df = _consolidated(tmp_path)
    assert df.columns[:3] == ["workload.rate", "k", "cell"]
    assert df.height == 18  # one row per cell × candidate
    assert df.drop("cell").equals(_expected())


def test_interrupted_sweep_resumes_without_recompute_or_loss(tmp_path: Path) -> None:
    first = CountingFn(fail_at=5)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, first)
    cdir = cells_dir_for(tmp_path / "s.parquet")
    kept = {p.name: p.stat().st_mtime_ns for p in cdir.glob("*.parquet")}
    assert len(kept) == 4  # the four cells finished before the interruption are on disk
    assert not list(cdir.glob("*.tmp"))  # no half-written files
    with pytest.raises(SpecplanError, match="--resume"):
        _run(tmp_path, toy_cell)  # refuses to silently mix old and new results
    second = CountingFn()
    assert _run(tmp_path, second, resume=True) == (5, 4)
    done_first = first.calls[:4]
    assert len(second.calls) == 5 and not any(c in done_first for c in second.calls)
    assert {p.name: p.stat().st_mtime_ns for p in cdir.glob("*.parquet") if p.name in kept} == kept
    assert _consolidated(tmp_path).drop("cell").equals(_expected())


def test_process_pool_keeps_finished_cells_when_one_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"workload.rate=3.*boom at rate 3"):
        _run(tmp_path, failing_cell, engine="processes", workers=2)
    cdir = cells_dir_for(tmp_path / "s.parquet")
    assert len(list(cdir.glob("*.parquet"))) == 6  # every cell but the three at rate 3
    assert _run(tmp_path, toy_cell, engine="processes", workers=2, resume=True) == (3, 6)
    assert _consolidated(tmp_path).drop("cell").equals(_expected())


def test_dask_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    assert _run(tmp_path, toy_cell, engine="dask", workers=2, processes=False) == (9, 0)
    assert _consolidated(tmp_path).drop("cell").equals(_expected())


def test_bad_engine_and_cluster_address(tmp_path: Path) -> None:
    with pytest.raises(SpecplanError, match="--engine"):
        _run(tmp_path, toy_cell, engine="threads")
    pytest.importorskip("distributed")
    with pytest.raises(SpecplanError, match="--cluster"):
        _run(tmp_path, toy_cell, engine="dask", cluster="tcp://127.0.0.1:1", connect_timeout_s=1.0)


def test_dask_existing_scheduler_by_address(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as lc:
        assert _run(tmp_path, toy_cell, engine="dask", cluster=lc.scheduler_address) == (9, 0)
        assert lc.scheduler_address  # the cluster outlives the sweep: it is not ours to close
    assert _consolidated(tmp_path).drop("cell").equals(_expected())


def test_key_column_types(tmp_path: Path) -> None:
    _run(tmp_path, toy_cell)
    df = _consolidated(tmp_path)
    assert df.schema["workload.rate"] == pl.Int64 and df.schema["k"] == pl.Int64
    assert df.schema["cell"] == pl.String

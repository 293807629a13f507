"""The simulator against a `vllm bench serve --save-result --save-detailed` run of the same load."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.fidelity.comparison import COMPARED, mean_values, values_from_run
from sim.fidelity.live_load import Prediction
from sim.model.workload import RequestSpec
from sim.results import metric_names as mn
from sim.results.metrics import good_mask, latency_stats, pause_stats, with_latencies

# ---------------------------------------------------------------------------------------------
# vLLM benchmark results


def vllm_measured_values(result: Any, slo_ms: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """The compared numbers of a `vllm bench serve` result, computed like the simulator's.

    Latencies over successful requests; ITL samples are vLLM's inter-chunk gaps; a request's
    pause is its longest gap; throughput is completions over vLLM's measured duration; goodput
    uses the scenario's SLOs (TTFT, TPOT, E2EL and pause), not vLLM's ``--goodput`` flags.
    """
    f = result.requests_frame().filter(pl.col("success"))
    out: dict[str, float | None] = {}
    stats: dict[str, float | None] = {}
    stats.update(latency_stats(f["ttft_s"].drop_nulls().to_numpy(), mn.TTFT))
    stats.update(latency_stats(f["tpot_s"].drop_nulls().to_numpy(), mn.TPOT))
    stats.update(latency_stats(f["e2el_s"].drop_nulls().to_numpy(), mn.E2EL))
    stats.update(latency_stats(result.itl_values_s(), mn.ITL))
    pauses = f.filter(pl.col("num_chunks") > 1)["max_pause_s"].drop_nulls().to_numpy()
    stats.update(pause_stats(pauses))
    stats["pause_ms_median"] = float(np.percentile(pauses * 1000.0, 50)) if pauses.size else None
    dur = result.duration_s
    stats[mn.REQUEST_THROUGHPUT] = f.height / dur if dur > 0 else None
    stats[mn.OUTPUT_THROUGHPUT] = float(f["output_tokens"].sum()) / dur if dur > 0 else None
    if slo_ms:
        frame = f.with_columns(pl.lit(mn.COMPLETED).alias("outcome"),
                               pl.col("output_tokens").alias("generated_tokens"))
        good = good_mask(frame, slo_ms)
        stats[mn.REQUEST_GOODPUT] = int(good.sum()) / dur if dur > 0 else None
    else:
        stats[mn.REQUEST_GOODPUT] = None
    stats[mn.MEAN_ACCEPTANCE_LENGTH] = None  # not in vLLM's benchmark output
    for _, col in COMPARED:
        out[col] = stats.get(col)
    return out


def vllm_requests(result: Any, segment: str, timeout_s: float | None, rng: np.random.Generator) -> list[RequestSpec]:
    """The vLLM run's requests for the simulator: its lengths in send order, arrivals drawn as
    vLLM draws them (it saves none). Failed requests are left out (their output is unknown)."""
    t = result.arrival_times(rng)
    ok = result.succeeded
    out = []
    for i in range(result.num_requests):
        if not ok[i] or result.output_lens[i] < 1:
            continue
        out.append(RequestSpec(len(out), float(t[i]), max(1, int(result.input_lens[i])),
                               int(result.output_lens[i]), segment, timeout_s))
    return out


def simulate_vllm(
    result: Any,
    scenario: Scenario,
    profile: Profile,
    candidate: str,
    seeds: Sequence[int],
) -> Prediction:
    """Simulate the vLLM run's load: same rate, burstiness and per-request lengths.

    Each seed draws a new arrival sequence (vLLM keeps none) and a new acceptance stream;
    numbers are averaged over seeds. Throughput uses the simulated span the same way vLLM's
    ``duration`` does (first send to last completion).
    """
    from sim.results.simulation import simulate_once

    seg = scenario.workload.segments[0]
    runs, vals = [], []
    for s in seeds:
        rng = np.random.default_rng(np.random.SeedSequence(int(s)).spawn(3)[2])
        reqs = vllm_requests(result, seg.name, scenario.workload.client_timeout_s, rng)
        if not reqs:
            raise SpecplanError(f"{result.source}: no successful requests to replay")
        span = max(r.arrival_s for r in reqs)
        sc = scenario.with_overrides({
            "workload.arrival": "gamma" if result.burstiness != 1.0 else "poisson",
            "workload.rate": float(result.request_rate) if math.isfinite(result.request_rate) else 1.0,
            "workload.burstiness": float(result.burstiness),
            "run.duration_s": max(span, 1e-3),
            "run.warmup_s": 0.0,
            "run.drain": True,
            "fleet.replicas": 1,
            "fleet.restart": None,
        })
        run = simulate_once(sc, profile, candidate, int(s), requests=reqs)
        v = values_from_run(run.summary, run.requests)
        done = run.requests.filter(pl.col("outcome") == mn.COMPLETED)
        end = done["finish_s"].max()
        if end is not None and end > 0:  # vLLM's duration: first send (t=0) to last completion
            v[mn.REQUEST_THROUGHPUT] = done.height / float(end)
            v[mn.OUTPUT_THROUGHPUT] = float(done["generated_tokens"].sum()) / float(end)
            if sc.slo.limits:
                good = good_mask(with_latencies(done), sc.slo.limits)
                v[mn.REQUEST_GOODPUT] = int(good.sum()) / float(end)
        runs.append(run)
        vals.append(v)
    notes = tuple(dict.fromkeys(n for r in runs for n in r.notes))
    sources = tuple(dict.fromkeys(s for r in runs for s in r.sources))
    return Prediction(mean_values(vals), tuple(runs), notes, sources)

"""The simulator against a `vllm bench serve --save-result --save-detailed` run of the same load."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.contracts.scenario import Scenario
from sim.fidelity.comparison import (
    COMPARED,
    compact_notes,
    error_rows,
    error_table,
    mean_values,
    values_from_run,
)
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


def length_notes(result: Any) -> tuple[str, ...]:
    """What ``vllm_requests`` assumed of the run's successful requests, said with the results:
    an empty prompt is sent as 1 token; an answer of 0 tokens has no ITL or TPOT to compare, so
    its request is left out."""
    ok = np.asarray(result.succeeded, bool)
    prompt = np.asarray(result.input_lens, np.int64)[ok]
    output = np.asarray(result.output_lens, np.int64)[ok]
    name = Path(str(result.source)).name
    notes = []
    if (prompt == 0).any():
        notes.append(f"vLLM results {name}: {int((prompt == 0).sum()):,} successful requests have input_lens 0; "
                     "simulated with a 1-token prompt")
    if (output < 1).any():
        notes.append(f"vLLM results {name}: {int((output < 1).sum()):,} successful requests have output_lens 0; "
                     "left out of the simulated run (no token to time)")
    return tuple(notes)


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
    notes = (*dict.fromkeys(n for r in runs for n in r.notes), *length_notes(result))
    sources = tuple(dict.fromkeys(s for r in runs for s in r.sources))
    return Prediction(mean_values(vals), tuple(runs), notes, sources)


def vllm_default_scenario(profile_path: str | Path) -> Scenario:
    """A scenario of vLLM's engine defaults for online serving (``assumed``; the description says
    so): what ``validate --vllm-results`` compares against when no scenario file is given."""
    return Scenario.from_dict({
        "name": "vllm-bench",
        "description": "assumed vLLM engine defaults (no --scenario given)",
        "run": {"duration_s": 1.0},
        "workload": {"arrival": "poisson", "rate": 1.0, "segments": [{
            "name": "bench", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 1},
            "output_tokens": {"dist": "fixed", "value": 1}}]},
        "fleet": {"profile": str(Path(profile_path).resolve()), "engine": {
            "max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 16,
            "memory_utilization": 0.9, "chunked_prefill": True}},
        "candidates": [{"name": "baseline", "speculation": "off"}],
    }, origin="(vLLM defaults)")


@dataclass(frozen=True)
class VllmComparison:
    """The error table of one or more vLLM result runs against the simulator, and its header."""

    table: pl.DataFrame
    header: list[str]
    profile: Profile | None


def compare_vllm_results(results: Sequence[Any], source: str, scenario_for: Callable[[Any], Scenario],
                         profile_for: Callable[[Scenario], Profile], candidate: str | None,
                         seeds: Sequence[int]) -> VllmComparison:
    """Simulate each result's load (``scenario_for(result)``, the profile from ``profile_for``) for
    ``candidate`` (default the scenario's baseline) on ``seeds`` and compare every prediction."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    profile: Profile | None = None
    sources: set[str] = set()
    for res in results:
        scenario = scenario_for(res)
        profile = profile or profile_for(scenario)
        sources.update(profile.sources())
        cand = candidate or scenario.baseline.name
        if cand not in scenario.candidate_names:
            raise SpecplanError(f"--candidate: unknown candidate {cand!r}; the scenario has {', '.join(scenario.candidate_names)}")
        if not res.open_loop:
            notes.append(f"{res.source}: not open loop (max_concurrency={res.max_concurrency}, "
                         f"request_rate={res.request_rate}); the simulator sends at the rate regardless")
        measured = vllm_measured_values(res, scenario.slo.limits)
        pred = simulate_vllm(res, scenario, profile, cand, seeds)
        notes.extend(pred.notes)
        sources.update(pred.sources)
        rate = res.request_rate if math.isfinite(res.request_rate) else float("nan")
        rows.extend(error_rows(res.source, None, rate, cand, pred.values, measured))
    table = error_table(rows)
    header = [
        f"specplan validate --vllm-results {source}: vLLM benchmark vs simulator "
        f"(profile {profile.name if profile else '?'}, arrival draws {','.join(map(str, seeds))})",
        "measured: vLLM's per-request ttfts/itls; E2EL = ttft + sum(itls); arrivals re-drawn at vLLM's "
        "rate/burstiness (vLLM saves none), lengths replayed in order",
        *[f"source: {s}" for s in sorted(sources)],
        *[f"note: {n}" for n in compact_notes(notes)],
    ]
    return VllmComparison(table, header, profile)

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
    MEASURED_REQUESTS,
    compact_notes,
    error_rows,
    error_table,
    mean_values,
    values_from_run,
)
from sim.fidelity.live_load import Prediction
from sim.fidelity.stream_chunks import Layout, StreamChunking, client_view, detect
from sim.results import metric_names as mn
from sim.results.metrics import good_mask, latency_stats, pause_stats, with_latencies
from sim.workload.workload import RequestSpec

# ---------------------------------------------------------------------------------------------
# vLLM benchmark results


def client_values(frame: pl.DataFrame, itl_s: np.ndarray, span_s: float | None,
                  slo_ms: Mapping[str, float] | None) -> dict[str, float | None]:
    """TTFT, TPOT, E2EL, ITL, pause, throughput and goodput of completed requests as the
    benchmark client timed them (``frame``: vLLM's per-request columns), one rule for both sides.

    Throughput is completions over ``span_s`` (vLLM's ``duration``: first send to last
    completion); None when the span is unknown. Goodput uses the scenario's SLOs (TTFT, TPOT,
    E2EL and pause), not vLLM's ``--goodput`` flags.
    """
    stats: dict[str, float | None] = {}
    stats.update(latency_stats(frame["ttft_s"].drop_nulls().to_numpy(), mn.TTFT))
    stats.update(latency_stats(frame["tpot_s"].drop_nulls().to_numpy(), mn.TPOT))
    stats.update(latency_stats(frame["e2el_s"].drop_nulls().to_numpy(), mn.E2EL))
    stats.update(latency_stats(np.asarray(itl_s, dtype=float), mn.ITL))
    pauses = frame.filter(pl.col("num_chunks") > 1)["max_pause_s"].drop_nulls().to_numpy()
    stats.update(pause_stats(pauses))
    stats["pause_ms_median"] = float(np.percentile(pauses * 1000.0, 50)) if pauses.size else None
    span = span_s if span_s is not None and math.isfinite(span_s) and span_s > 0 else None
    stats[mn.REQUEST_THROUGHPUT] = frame.height / span if span else None
    stats[mn.OUTPUT_THROUGHPUT] = float(frame["output_tokens"].sum()) / span if span else None
    stats[mn.REQUEST_GOODPUT] = None
    if slo_ms and span:
        done = frame.with_columns(pl.lit(mn.COMPLETED).alias("outcome"),
                                  pl.col("output_tokens").alias("generated_tokens"))
        stats[mn.REQUEST_GOODPUT] = int(good_mask(done, slo_ms).sum()) / span
    return stats


def vllm_measured_values(result: Any, slo_ms: Mapping[str, float] | None = None) -> dict[str, float | None]:
    """The compared numbers of a `vllm bench serve` result, computed like the simulator's.

    Latencies over successful requests; ITL samples are vLLM's inter-chunk gaps; a request's
    pause is its longest gap; throughput is completions over vLLM's measured duration.
    """
    f = result.requests_frame().filter(pl.col("success"))
    stats = client_values(f, result.itl_values_s(), result.duration_s, slo_ms)
    stats[mn.MEAN_ACCEPTANCE_LENGTH] = None  # not in vLLM's benchmark output
    return {**{col: stats.get(col) for _, col in COMPARED}, MEASURED_REQUESTS: float(f.height)}


def measured_chunking(result: Any) -> StreamChunking:
    """How the server chunked its stream, from the successful requests' lengths and ITL counts."""
    ok = result.succeeded
    return detect([n for n, k in zip(result.output_lens, ok, strict=True) if k],
                  [m for m, k in zip(result.itl_counts, ok, strict=True) if k])


def grouping_for(chunking: StreamChunking, requests: pl.DataFrame) -> tuple[float, Layout, bool, str | None]:
    """(size, layout, by steps, note) to group one simulated run by.

    A regular rule is the server's and applies as it is, in tokens. Irregular chunks are matched
    by their mean: in tokens for a run of one-token steps; in whole steps for a speculative run,
    whose step already carries ``a`` tokens on average (``k = round(mean / a)`` steps a chunk;
    a speculating server that streams every step has irregular chunks of about ``a`` tokens).
    """
    if chunking.regular or chunking.requests == 0:
        return float(chunking.tokens), chunking.layout, False, None
    done = requests.filter((pl.col("outcome") == mn.COMPLETED) & (pl.col("num_bursts") > 1))
    later_steps = float((done["num_bursts"] - 1).sum() or 0)
    a = float((done["generated_tokens"] - 1).sum() or 0) / later_steps if later_steps else 1.0
    if a <= 1.0 + 1e-9:
        return float(chunking.tokens), "first-alone", False, None
    k = max(1, round(chunking.mean_tokens_per_gap / a))
    return float(k), "first-alone", True, (
        f"irregular chunks of ~{chunking.mean_tokens_per_gap:.3g} tokens against {a:.3g} tokens per "
        f"simulated step: {k} step(s) grouped into each chunk")


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
    chunking: StreamChunking | None = None,
) -> Prediction:
    """Simulate the vLLM run's load: same rate, burstiness and per-request lengths.

    Each seed draws a new arrival sequence (vLLM keeps none) and a new acceptance stream;
    numbers are averaged over seeds. Throughput uses the simulated span the same way vLLM's
    ``duration`` does (first send to last completion). With ``chunking`` (the server's, see
    ``stream_chunks``) the client-side numbers come from the simulated stream grouped into the
    same chunks, as the benchmark client would have timed it.
    """
    from sim.results.simulation import simulate_once

    seg = scenario.workload.segments[0]
    runs, vals = [], []
    extra: list[str] = []
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
        span = float(end) if end is not None and end > 0 else None  # vLLM's duration: t=0 to last completion
        size, layout, by_steps, how = grouping_for(chunking, run.requests) if chunking else (1.0, "first-alone", False, None)
        if how:
            extra.append(how)
        if size > 1 or layout != "first-alone":
            view = client_view(run.requests, run.itl, size, layout, by_steps)
            v.update({k: x for k, x in client_values(view.requests, view.itl_s, span, sc.slo.limits).items()
                      if k in v})
            if view.approximate:
                extra.append(f"speculative steps: the simulator keeps no per-step token count; each later "
                             f"step of {view.approximate} requests is taken as the request's mean when "
                             "grouping into chunks")
        elif span:
            v[mn.REQUEST_THROUGHPUT] = done.height / span
            v[mn.OUTPUT_THROUGHPUT] = float(done["generated_tokens"].sum()) / span
            if sc.slo.limits:
                good = good_mask(with_latencies(done), sc.slo.limits)
                v[mn.REQUEST_GOODPUT] = int(good.sum()) / span
        runs.append(run)
        vals.append(v)
    notes = tuple(dict.fromkeys([*(n for r in runs for n in r.notes), *extra, *length_notes(result)]))
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


def chunk_labels(chunking: StreamChunking) -> dict[str, str]:
    """Row labels that carry the comparison basis: ITL and pauses per chunk when chunks held
    several tokens (the header line says how they were detected)."""
    if chunking.one_token:
        return {}
    size = f"{chunking.tokens}" if chunking.regular else f"{chunking.mean_tokens_per_gap:.2g}"
    per = f"chunks of ~{size} tok"
    return {col: label.replace("(ms)", f"(ms, {per})") for label, col in COMPARED
            if col.startswith(("itl_", "pause_"))}


def run_facts(result: Any, chunking: StreamChunking, prefix: str = "") -> list[str]:
    """Header lines of one result: its load (what is known of it, never a NaN) and the basis
    ITL and pauses were compared on."""
    n = result.num_requests
    if math.isfinite(result.request_rate):
        load = f"load: {result.request_rate:g} req/s, burstiness {result.burstiness:g}, {n} requests"
    else:
        load = f"load: request_rate inf: vLLM sent all {n} requests at t = 0"
    if result.duration_s is None:
        load += "; measured throughput and goodput unknown (the file has no positive duration)"
    else:
        load += f"; {int(result.succeeded.sum())} completed in {result.duration_s:g} s"
    return [prefix + load, prefix + chunking.basis()]


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
    facts: list[str] = []
    profile: Profile | None = None
    sources: set[str] = set()
    for res in results:
        scenario = scenario_for(res)
        profile = profile or profile_for(scenario)
        sources.update(profile.sources())
        cand = candidate or scenario.baseline.name
        if cand not in scenario.candidate_names:
            raise SpecplanError(f"--candidate: unknown candidate {cand!r}; the scenario has {', '.join(scenario.candidate_names)}")
        if res.max_concurrency is not None:
            notes.append(f"{res.source}: not open loop (max_concurrency={res.max_concurrency}); "
                         "the simulator sends at the rate regardless")
        chunking = measured_chunking(res)
        measured = vllm_measured_values(res, scenario.slo.limits)
        pred = simulate_vllm(res, scenario, profile, cand, seeds, chunking)
        notes.extend(pred.notes)
        sources.update(pred.sources)
        facts.extend(run_facts(res, chunking, prefix=f"{res.source}: " if len(results) > 1 else ""))
        rate = res.request_rate if math.isfinite(res.request_rate) else None
        rows.extend(error_rows(res.source, None, rate, cand, pred.values, measured,
                               labels=chunk_labels(chunking)))
    table = error_table(rows)
    header = [
        f"specplan validate --vllm-results {source}: vLLM benchmark vs simulator "
        f"(profile {profile.name if profile else '?'}, arrival draws {','.join(map(str, seeds))})",
        "measured: vLLM's per-request ttfts/itls; E2EL = ttft + sum(itls); arrivals re-drawn at vLLM's "
        "rate/burstiness (vLLM saves none), lengths replayed in order",
        *facts,
        *[f"source: {s}" for s in sorted(sources)],
        *[f"note: {n}" for n in compact_notes(notes)],
    ]
    return VllmComparison(table, header, profile)

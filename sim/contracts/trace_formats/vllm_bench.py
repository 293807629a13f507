"""A `vllm bench serve --save-result --save-detailed` file replayed as a workload.

The file is parsed by sim/contracts/vllm_results.py (the one reader of these files; fidelity
compares against the same objects). It holds each request's ``input_lens`` and ``output_lens``
in send order and the run's ``request_rate``, ``burstiness`` and ``max_concurrency``, but no send
times: they are drawn as vLLM draws them (``VllmBenchResult.arrival_times``) from the scenario's
``schedule_seed``, and the notes say so. Failed requests (a non-empty error) are left out and
counted. A run capped by ``--max-concurrency`` at an infinite rate is a closed loop, which an
open-loop replay cannot stand in for: refused.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.contracts.errors import SpecplanError
from sim.contracts.trace_formats import read_notes
from sim.contracts.trace_formats.parsed import Trace
from sim.contracts.vllm_results import load_vllm_results


def read(p: Path, schedule_seed: int | None = None, run_index: int | None = None) -> Trace:
    """The lengths and drawn send times of one run of a vLLM results file."""
    runs = load_vllm_results(p)
    if run_index is None and len(runs) > 1:
        raise SpecplanError(f"{p}: holds {len(runs)} runs (--append-result); valid: choose one with "
                            f"workload.trace.run_index = 0..{len(runs) - 1}")
    i = run_index or 0
    if i >= len(runs):
        raise SpecplanError(f"{p}: workload.trace.run_index {i} is past the file's {len(runs)} run(s); "
                            f"valid: 0..{len(runs) - 1}")
    res = runs[i]
    cap = res.max_concurrency
    if cap is not None and not math.isfinite(res.request_rate):
        raise SpecplanError(
            f"{res.source}: max_concurrency {cap} with request_rate inf is a closed loop (each request "
            "sent when one finishes); an open-loop trace replay cannot stand in for it; valid: a run "
            f"with a finite request_rate, or closed-loop clients: arrival = \"concurrency\", "
            f"concurrency = {cap}")
    seed = 0 if schedule_seed is None else schedule_seed
    sent = res.arrival_times(np.random.default_rng(np.random.SeedSequence(seed)))
    ok = res.succeeded
    if not ok.any():
        raise SpecplanError(f"{res.source}: errors: every request failed; nothing to replay")
    rate = "inf (all at once)" if not math.isfinite(res.request_rate) else f"{res.request_rate:g} req/s"
    notes = [f"trace {p.name}: vLLM saved no send times; drawn as `vllm bench serve` draws them "
             f"(rate {rate}, burstiness {res.burstiness:g}, schedule_seed {seed})"]
    failed = int((~ok).sum())
    if failed:
        notes.append(f"trace {p.name}: {failed:,} of {len(ok):,} requests failed in the recorded run "
                     "(errors); left out of the replay")
    if cap is not None:
        notes.append(f"trace {p.name}: recorded with --max-concurrency {cap}; replayed open loop at the "
                     "recorded rate, without that cap")
    prompt = np.asarray(res.input_lens, np.int64)[ok]
    output = np.asarray(res.output_lens, np.int64)[ok]
    index = np.flatnonzero(ok)
    notes += read_notes.zero_length_notes(p.name, [("input_lens", "prompt", prompt),
                                                   ("output_lens", "output", output)],
                                          lambda i: f"request {int(index[i])}")
    return Trace(path=p, offsets_s=sent[ok] - sent[0], prompt_tokens=prompt, output_tokens=output,
                 format="vllm-bench", notes=tuple(notes), max_concurrency=cap)

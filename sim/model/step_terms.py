"""A decode step's price split into its parts, each with the provenance of its number.

Why: "is speculation still worth it at batch b" turns on how the extra ``b·k`` verified tokens
are priced; a reader (``bench/specdecode_bench_targets.py``, docs/fidelity-gpu.md) must see
which part grows with them and where each part's number comes from. The parts are read from the
same timer and grids that price the simulated steps, so they sum to ``ProfileStepTimer.price``
(a test holds it); nothing here prices a step on its own.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.model.kernels.price_kernels import graph_tokens, host_seconds
from sim.model.step_time import ProfileStepTimer


class StepTerm(NamedTuple):
    """One part of a step's price: its name, seconds and where the number comes from."""

    name: str
    seconds: float
    source: str


def _method(prov) -> str:
    return prov.method if prov is not None else "not in the profile"


def decode_step_terms(timer: ProfileStepTimer, b: int, k: int, context: float,
                      proposer: str | None = None) -> list[StepTerm]:
    """Parts of one decode-only step of ``b`` rows drafting ``k`` tokens each (``k = 0``: plain
    decode) at mean context ``context``; they sum to ``timer.price`` of that step."""
    t = timer.profile.timing
    grid_src = _method(t.provenance)
    rows = b * (k + 1)
    out: list[StepTerm] = []
    if timer.fused:
        assert timer._dense and timer._logits and timer._dattn
        real = timer._dense(rows)
        out.append(StepTerm(f"dense ops over {rows} tokens", real, grid_src))
        padded = graph_tokens(timer._graphs, rows, k + 1)
        if padded != rows:
            pad_src = _method(t.cuda_graphs.provenance if t.cuda_graphs else None)
            out.append(StepTerm(f"CUDA-graph padding to {padded:g} tokens", timer._dense(padded) - real, pad_src))
        out.append(StepTerm(f"LM head over {rows} rows", timer._logits(rows), grid_src))
        out.append(StepTerm(f"attention, {k + 1} queries/row", timer._dattn(b, k + 1, context),
                            f"{grid_src} + modelled" if k else grid_src))
    else:
        out.append(StepTerm(f"target pass {b}x{k + 1}", timer._forward(b, k + 1, context), grid_src))
    if timer.sample_s:
        out.append(StepTerm(f"sampling over {rows} positions", timer.sample_s * rows,
                            _method(t.sampler.provenance if t.sampler else None)))
    if k > 0 and proposer is not None:
        timer.check_proposer(proposer)
        pt = t.proposers[proposer]
        out.append(StepTerm(f"draft D({b}, {k})", timer._draft[proposer](b, k, context), f"{grid_src} + modelled"))
        out.append(StepTerm(f"draft host H({b}, {k})", timer._overhead[proposer](b, k),
                            _method(pt.overhead_provenance or t.provenance)))
    hr = t.host_rows
    if hr is not None:
        src = _method(hr.provenance)
        every = host_seconds(timer.tm, b, 0, False)
        out.append(StepTerm(f"host, scheduler update over {b} requests", every, src))
        if k > 0 and proposer is not None:
            out.append(StepTerm(f"host, verified tokens to lists ({b} requests)",
                                host_seconds(timer.tm, b, 0, True) - every, src))
    if timer.step_overhead_s:
        out.append(StepTerm("per-step host overhead", timer.step_overhead_s,
                            _method(t.step_overhead.provenance if t.step_overhead else None)))
    return out


__all__ = ["StepTerm", "decode_step_terms"]

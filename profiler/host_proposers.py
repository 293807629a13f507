"""vLLM's model-free proposers (``ngram``, ``suffix``) on a profile priced for a GPU.

Why separate: these proposers run on the serving host's CPU between engine steps, so no kernel
database or roofline prices them. Their GPU cost is the verification the target already pays
(``timing.target_forward`` at ``k + 1`` tokens per row); what they add is host time per step,
written as ``H(b, k)`` with its own *assumed* provenance, and a draft grid of zeros (no GPU
pass). How often a request has a proposal at all is the acceptance entry's ``num_steps``
(docs/profile-format.md, "proposal rate"), so it comes from acceptance data, measured, imported
or assumed, never from here.
"""

from __future__ import annotations

from typing import Any

HOST_PROPOSERS = ("ngram", "suffix")
LOOKUP_S_PER_ROW = 5e-6
"""Assumed host time per request per step for a lookup (5 µs)."""
LOOKUP_NOTE = (
    "assumed, not measured on the serving host: {us:g} us of host time per request per step for the "
    "{kind} lookup, H(b, k) = b x {us:g} us for any k (the lookup's cost does not depend on k; its growth "
    "with context is not modelled). Order of magnitude: specplan's own Python prompt lookup measured "
    "0.05-0.13 ms per request at 64-1,024 tokens of context on an EPYC host (profiles/smollm2-135m-cpu.json), "
    "and vLLM's numba lookup is 20-30x faster at large batch (vLLM pull request 13365: ShareGPT, 5K "
    "requests, 54.3 s -> 1.9 s of cumulative lookup, about 2.5 % of the run){extra}. No GPU pass: "
    "timing.proposers.{name}.draft is zero; the target's verification of k+1 tokens is in target_forward"
)


def host_identity(kind: str) -> dict[str, Any]:
    """The profile's proposer entry: vLLM's method name, no model."""
    if kind == "ngram":
        return {"kind": "ngram", "note": "vLLM prompt lookup (method ngram) on the serving host"}
    return {"kind": "suffix", "note": "vLLM suffix decoding (method suffix, Arctic Inference) on the serving host"}


def host_timing(kind: str, batch: list[int], ks: list[int], context: list[int], *, per_row_s: float,
                provenance: dict[str, Any]) -> dict[str, Any]:
    """``timing.proposers.<kind>``: zero GPU draft grid, host lookup as the overhead grid."""
    return {
        "draft": {"axes": {"batch": batch, "k": ks, "context": context},
                  "median": [[[0.0 for _ in context] for _ in ks] for _ in batch]},
        "overhead": {"axes": {"batch": batch, "k": ks}, "median": [[b * per_row_s for _ in ks] for b in batch]},
        "overhead_provenance": provenance,
    }


def lookup_note(kind: str, per_row_s: float) -> str:
    """The assumed-cost note of ``host_timing``'s overhead provenance."""
    if per_row_s != LOOKUP_S_PER_ROW:
        return (f"given on the command line (--host-lookup-us {per_row_s * 1e6:g}): H(b, k) = b x {per_row_s * 1e6:g} us "
                f"of host time per step for the {kind} lookup; no GPU pass (timing.proposers.{kind}.draft is zero)")
    extra = "" if kind == "ngram" else "; suffix decoding's tree update and match are taken at the same cost"
    return LOOKUP_NOTE.format(us=per_row_s * 1e6, kind=kind, extra=extra, name=kind)


def lookup_seconds(us: float | None) -> float:
    """``--host-lookup-us`` in seconds (default: the assumed figure); one line when negative."""
    from sim.contracts.errors import SpecplanError

    if us is None:
        return LOOKUP_S_PER_ROW
    if not us >= 0:
        raise SpecplanError(f"--host-lookup-us {us}: must be >= 0 microseconds per request per step")
    return us * 1e-6


def host_memory() -> dict[str, int]:
    """No weights, no KV cache, no activations on the GPU."""
    return {"weight_bytes": 0, "kv_bytes_per_token": 0, "activation_peak_bytes": 0}

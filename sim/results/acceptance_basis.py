"""What a speculative candidate's acceptance, and its draft's host time, rest on, in one line
each that the verdict prints.

Why: acceptance is the least certain input and moves every answer. Precedence is measured >
published > assumed; an assumed acceptance is the last resort and the verdict names it so, with
the step that would replace it (docs/profile-format.md, "Acceptance"). The draft's host time
H(b, k) is the next: an import assumes it (0.5 ms a draft pass), and where verification is cheap
it alone can turn the sign of speculation (docs/fidelity-gpu.md §6), so the verdict names it too.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.contracts.candidate import Candidate
from sim.contracts.errors import clip
from sim.contracts.profile import Profile
from sim.contracts.profile_identity import Provenance

IMPORT_HINT = "bring measured counters: specplan profile import-vllm"


def rates_words(rates: Sequence[float]) -> str:
    """``0.75 per position`` for a geometric curve (``r, r², …``), else the survival rates."""
    vals = [float(r) for r in rates]
    if vals and vals[0] > 0 and all(abs(v - vals[0] ** (i + 1)) < 2e-3 for i, v in enumerate(vals)):
        return f"{vals[0]:g} per position"
    return "survival " + ", ".join(f"{v:.3g}" for v in vals) + " by position"


KIND_WORDS = {"draft_model": "a draft model", "eagle3": "EAGLE-3", "eagle": "EAGLE", "mtp": "MTP",
              "ngram": "n-gram", "suffix": "suffix decoding"}
"""A proposer kind in a verdict's words (the profile and vLLM's config say ``draft_model``)."""


def short_citation(cite: str, width: int = 90) -> str:
    """A citation's words up to its first file path or address (the sources line keeps it all),
    clipped at a word boundary: a verdict line names the source, not its file."""
    words = []
    for w in cite.split():
        if "/" in w or "_" in w:
            break
        words.append(w)
    short = " ".join(words).rstrip(",;:") or cite
    return clip(short, width) + (" …" if short != cite and len(short) <= width else "")


def acceptance_basis(cand: Candidate, profile: Profile) -> str | None:
    """``ASSUMED 0.75 per position (no published or measured acceptance for eagle3 on X: the last
    resort; bring measured counters: …)``, ``published (citation)``, ``measured``; None for a
    candidate that does not speculate or a profile without the entry (loading says that)."""
    if not cand.speculates or cand.proposer is None:
        return None
    if cand.assumed_acceptance is not None:
        return (f"ASSUMED {rates_words(cand.assumed_acceptance)} (the scenario's "
                f"assumed_acceptance, the last resort; {IMPORT_HINT})")
    if cand.acceptance_trace is not None:
        return f"measured per-request trace {cand.acceptance_trace}"
    entry = profile.acceptance.get(cand.proposer)
    if entry is None:
        return None
    method = entry.provenance.method
    if method == "assumed":
        seg = entry.segments[0]
        rates = [a / seg.num_drafts for a in seg.accepted_per_pos] if seg.num_drafts else []
        ident = profile.proposers.get(cand.proposer)
        kind = ident.kind if ident is not None else cand.proposer
        return (f"ASSUMED {rates_words(rates)} (no published or measured acceptance for "
                f"{KIND_WORDS.get(kind, kind)} on {profile.target.id}: the last resort; {IMPORT_HINT})")
    if method == "published":
        return f"published ({short_citation(entry.provenance.citation or '')})"
    return method


HOST_HINT = "`specplan calibrate` fits it to your own runs (its draft host scale)"
"""How to replace an assumed draft host time, in words a page can show (the term is ``--fit``'s)."""


def assumed_draft_host(profile: Profile, proposer: str) -> Provenance | None:
    """The provenance of ``proposer``'s host-time grid H(b, k) when it is assumed (its own, else
    the timing section's); None when it is not, or the profile has no timing for ``proposer``."""
    pt = profile.timing.proposers.get(proposer)
    if pt is None:
        return None
    prov = pt.overhead_provenance or profile.timing.provenance
    return prov if prov.method == "assumed" else None


def draft_host_basis(cand: Candidate, profile: Profile) -> str | None:
    """``ASSUMED (assumed default: 0.50 ms of host time per draft pass …); …`` when the draft's
    host time H(b, k) of a speculative candidate is assumed; None when it is measured, published or
    calibrated, or the candidate does not speculate (the sources line says where it came from)."""
    if not cand.speculates or cand.proposer is None:
        return None
    prov = assumed_draft_host(profile, cand.proposer)
    if prov is None:
        return None
    why = (prov.notes or "no note").split(" (")[0].rstrip(".;: ")
    return f"ASSUMED ({clip(why, 90)}); `specplan breakeven` gives the H at which each k stops paying; {HOST_HINT}"

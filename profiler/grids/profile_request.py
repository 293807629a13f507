"""What a profile run is asked to measure: the target, the proposers, the options (``specplan profile``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiler.grids.timing_grids import DraftRuntime, TimingGrids
from profiler.passes.memory import ProposerMemoryInput
from profiler.passes.model_types import LoadedModel
from profiler.passes.models import check_tokenizers_compatible, load_model
from sim.contracts.errors import SpecplanError

_SELF_RE = re.compile(r"^selfdraft:(\d+)$")
_NGRAM_RE = re.compile(r"^ngram(?::(\d+)-(\d+))?$")


@dataclass(frozen=True)
class ProposerRequest:
    """A proposer as asked on the command line: ``ngram[:MIN-MAX]``, ``selfdraft:L``, ``draft:SPEC``."""

    text: str
    kind: str
    layers: int | None = None
    spec: str | None = None
    ngram: tuple[int, int] = (2, 4)

    @classmethod
    def parse(cls, text: str) -> ProposerRequest:
        t = text.strip()
        if m := _NGRAM_RE.match(t):
            lo, hi = (int(m.group(1)), int(m.group(2))) if m.group(1) else (2, 4)
            return cls(t, "ngram", ngram=(lo, hi))
        if m := _SELF_RE.match(t):
            return cls(t, "self_draft", layers=int(m.group(1)))
        if t.startswith("draft:") and t[6:].strip():
            return cls(t, "draft_model", spec=t[6:].strip())
        raise SpecplanError(
            f"--proposer {text!r}: expected ngram, ngram:MIN-MAX, selfdraft:LAYERS or draft:MODEL_SPEC"
        )


@dataclass(frozen=True)
class ProfileRequest:
    """Everything that decides what a profile run measures (and so its checkpoint keys)."""

    target: str
    out: Path
    proposers: tuple[ProposerRequest, ...] = ()
    dtype: str = "auto"
    device: str = "auto"
    quick: bool = False
    resume: bool = False
    prompts: str | None = None
    temperatures: tuple[float, ...] = (0.0, 0.7)
    k_max: int = 6
    name: str | None = None
    seed: int = 0
    command: str | None = None
    grids: TimingGrids | None = None
    """Explicit grids (tests, small runs); None picks ``default_grids`` for the device."""
    measure_acceptance: bool = True
    prompts_per_segment: int | None = None
    max_new_tokens: int | None = None
    progress: bool = True
    rounds: int = 1
    """Passes over the whole timing grid; a cell's value is the median of its rounds' medians."""
    reserve_gb: float | None = None
    """GiB kept for other applications: out of every KV capacity (profiler/passes/memory.py)."""
    reserve_fraction: float | None = None
    """Or that share of the device's memory (one of the two)."""
    grid_checks: bool = True
    """Probe between measured grid values and add those where step time is not smooth
    (``profiler.grids.grid_refine``); off, exactly the grid asked for is measured."""
    budget_s: float | None = None
    """Seconds the whole run may take (``--budget``): the grid is shrunk to fit or the run refused
    before anything is measured (``profiler.grids.budget``); None: no limit, the estimate is still said."""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise SpecplanError(f"--rounds {self.rounds}: must be at least 1")
        if self.budget_s is not None and not self.budget_s > 0:
            raise SpecplanError(f"--budget {self.budget_s}: must be a positive number of seconds")
        if self.k_max < 1:
            raise SpecplanError(f"--k-max {self.k_max}: must be at least 1")
        from profiler.passes.memory import check_reserve

        check_reserve(self.reserve_gb, self.reserve_fraction)
        if not self.temperatures or any(t < 0 for t in self.temperatures):
            raise SpecplanError(f"--temperatures {list(self.temperatures)}: need values >= 0")
        names = [p.text for p in self.proposers]
        if len(set(names)) != len(names):
            raise SpecplanError(f"--proposer: listed twice ({', '.join(names)})")


@dataclass
class ProfiledProposer:
    """A requested proposer, built: its implementation, its draft model and notes about it."""

    name: str
    request: ProposerRequest
    impl: Any
    """P2's proposer object (NgramProposer, SelfDraftProposer, DraftModelProposer)."""
    draft: LoadedModel | None = None
    notes: list[str] = field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        ident = dict(self.impl.identity())
        if self.notes:
            ident["note"] = "; ".join([*([ident["note"]] if ident.get("note") else []), *self.notes])
        return ident

    def runtime(self) -> DraftRuntime:
        if self.request.kind == "ngram":
            return DraftRuntime(self.name, "ngram", lookup=self.impl.lookup)
        return DraftRuntime(self.name, self.request.kind, model=self.impl.model)

    def memory_input(self) -> ProposerMemoryInput:
        if self.request.kind == "ngram":
            return ProposerMemoryInput(self.name, "ngram")
        return ProposerMemoryInput(self.name, self.request.kind, model=self.impl.model,
                                   shares_target_weights=self.request.kind == "self_draft",
                                   layers=self.request.layers)

    def label(self) -> str:
        ident = self.impl.identity()
        if ident["kind"] == "ngram":
            return f"prompt lookup {ident['prompt_lookup_min']}..{ident['prompt_lookup_max']}"
        if ident["kind"] == "self_draft":
            return f"self-draft: {ident.get('note')}"
        return self.draft.label if self.draft else str(ident["model"]["id"])


def build_proposers(target: LoadedModel, requests: tuple[ProposerRequest, ...], *, dtype: str,
                    device: str) -> list[ProfiledProposer]:
    """Instantiate each requested proposer (loading draft models, checking tokenizers)."""
    from profiler.passes.proposers import DraftModelProposer, NgramProposer, SelfDraftProposer

    out: list[ProfiledProposer] = []
    for req in requests:
        if req.kind == "ngram":
            lo, hi = req.ngram
            name = "ngram" if (lo, hi) == (2, 4) else f"ngram-{lo}-{hi}"
            out.append(ProfiledProposer(name, req, NgramProposer(lo, hi, name=name)))
        elif req.kind == "self_draft":
            impl = SelfDraftProposer(target, int(req.layers or 0))
            out.append(ProfiledProposer(impl.name, req, impl))
        else:
            draft = load_model(str(req.spec), dtype=dtype, device=device)
            check_tokenizers_compatible(target, draft, draft_name=req.text)
            impl = DraftModelProposer(draft)
            out.append(ProfiledProposer(impl.name, req, impl, draft=draft))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise SpecplanError(f"--proposer: two proposers share a name ({', '.join(names)})")
    return out

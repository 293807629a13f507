"""The config to deploy a candidate on the engine the scenario names (``fleet.engine``), in that
engine's own spelling, or the one line saying it cannot run it.

Why its own module: each engine spells speculation differently and load-dependent k exists on
some only; a config that the engine rejects (vLLM's removed ``disable_by_batch_size``, PR #35060)
or that carries another k than the candidate the verdict names is worse than none. The forms,
checked against each engine's source:

- vLLM: ``--speculative-config`` JSON (``vllm/config/speculative.py``): ``method``, ``model``,
  ``num_speculative_tokens`` and, for k by batch size, ``num_speculative_tokens_per_batch_size``
  = ``[[start, end, k], ...]``, inclusive ranges (PR #32374; docs
  ``dynamic_speculative_decoding.md``); ``num_speculative_tokens`` stays the start-up maximum.
- TensorRT-LLM: ``speculative_config`` in ``--extra_llm_api_options`` YAML: ``decoding_type``,
  ``max_draft_len`` and ``draft_len_schedule`` {batch size: k}, each key the top of its range
  and k = 0 above the largest key (``get_draft_len_for_batch_size``; PRs #8194, #10860, #12262).
- SGLang: server flags ``--speculative-algorithm``, ``--speculative-num-steps``,
  ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``; no k by batch size.

A schedule is ``[(start, end, k), ...]``: inclusive decode-batch ranges from 1 to the engine's
``max_num_seqs``. ``schedule_of`` derives it from a candidate's policy; a computed schedule
(issue 37 item 5) goes through ``emit`` the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.contracts.candidate import Candidate
from sim.decisions.vllm_config import vllm_method
from sim.model.serving_engine import ServingEngine

Schedule = tuple[tuple[int, int, int], ...]

_SGLANG = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "draft_model": "STANDALONE",
           "ngram": "NGRAM"}
"""SGLang's ``--speculative-algorithm`` by vLLM method (MTP layers run through its EAGLE worker)."""
_TRTLLM = {"eagle": "Eagle", "eagle3": "Eagle3", "mtp": "MTP", "draft_model": "DraftTarget",
           "ngram": "NGram"}
"""TensorRT-LLM's ``decoding_type`` by vLLM method."""
DSD_SOURCE = "vLLM PR #32374 (num_speculative_tokens_per_batch_size)"
COLLAPSE = ("switching k at a batch-size threshold can collapse throughput when the batch hovers "
            "there (vLLM issue #49548): check the load does not sit at a range's edge")


@dataclass(frozen=True)
class EmittedConfig:
    """One candidate's deployable config for one engine, or why there is none."""

    candidate: str
    engine: str
    """The engine's label (``ServingEngine.label``)."""
    k: int
    """The candidate's k (its largest, for a schedule): what the config carries as its maximum."""
    runnable: bool
    """False: the engine cannot run the candidate's policy (an idealised in-engine policy)."""
    form: str
    """Where the config goes (``--speculative-config``, server flags, extra_llm_api_options)."""
    config: Any
    """The config itself: a JSON-able mapping, or a list of flags; None when not runnable."""
    notes: tuple[str, ...] = ()

    @property
    def config_k(self) -> int | None:
        """The maximum k written in the config (None when nothing is written)."""
        c = self.config
        if isinstance(c, list):  # SGLang: a chain verifies k drafts plus the last verified token
            return int(c[c.index("--speculative-num-draft-tokens") + 1]) - 1
        if not isinstance(c, dict):
            return None
        if "num_speculative_tokens" in c:
            return int(c["num_speculative_tokens"])
        spec = c.get("speculative_config", {})
        return int(spec.get("max_draft_len", spec.get("num_nextn_predict_layers", 0))) or None

    def lines(self) -> list[str]:
        """Terminal lines: what to deploy, then the caveats as comments."""
        if not self.runnable:
            return [f"# {self.candidate}: not runnable on {self.engine}: idealised", *(f"# {n}" for n in self.notes)]
        body = (" ".join(self.config) if isinstance(self.config, list)
                else json.dumps(self.config, indent=2))
        return [f"# {self.candidate} on {self.engine}: {self.form}", body, *(f"# {n}" for n in self.notes)]

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "engine": self.engine, "k": self.k, "runnable": self.runnable,
                "form": self.form, "config": self.config, "notes": list(self.notes)}


def schedule_of(candidate: Candidate, top: int) -> Schedule | None:
    """The candidate's k as inclusive decode-batch ranges up to ``top`` (the engine's
    ``max_num_seqs``); None for a fixed k; raises ValueError for a policy no batch-size schedule
    expresses (hysteresis, KV pressure)."""
    if candidate.policy == "fixed":
        return None
    if candidate.policy == "off_above_batch":
        m = int(candidate.max_batch or 0)
        k = int(candidate.k or 0)
        return ((1, top, k),) if m >= top else ((1, m, k), (m + 1, top, 0))
    if candidate.policy == "k_by_batch":
        pairs = [(b, kk) for b, kk in candidate.k_by_batch or () if b <= top]
        return tuple((b, (pairs[i + 1][0] - 1) if i + 1 < len(pairs) else top, kk)
                     for i, (b, kk) in enumerate(pairs))
    raise ValueError(f"policy {candidate.policy!r} switches on "
                     f"{'the decode batch with hysteresis' if candidate.policy == 'adaptive' else 'KV-cache use'}, "
                     "which no batch-size schedule expresses")


def emit(candidate: Candidate, proposer: Any, engine: ServingEngine, top: int,
         schedule: Sequence[tuple[int, int, int]] | None = None) -> EmittedConfig | None:
    """The config for ``candidate`` (``proposer``: its profile identity: kind, model,
    prompt-lookup window) on ``engine``; ``schedule`` overrides the one its policy gives. None
    for a candidate that does not speculate."""
    if not candidate.speculates:
        return None
    k = candidate.max_k
    if k == 0:  # a computed schedule (schedule = "auto") that pays at no batch the engine reaches
        return EmittedConfig(candidate.name, engine.label, 0, False, "", None, (
            "its computed schedule drafts at no decode batch: deploy without speculation",))
    try:
        sched = tuple(schedule) if schedule is not None else schedule_of(candidate, top)
    except ValueError as exc:
        return EmittedConfig(candidate.name, engine.label, k, False, "", None, (
            str(exc), "deployable instead: a fixed k, or two routes ([[two_routes]], docs/scenario-format.md)"))
    if sched is not None and {kk for _, _, kk in sched} == {k}:
        sched = None  # its k at every batch in reach: a fixed k
    kind = getattr(proposer, "kind", "ngram")
    model = getattr(getattr(proposer, "model", None), "id", None)
    method = vllm_method(kind, candidate.proposer or "", model, getattr(proposer, "note", None))
    if engine.name == "vllm":
        return _vllm(candidate, proposer, engine, method, model, k, sched)
    if engine.name == "trtllm":
        return _trtllm(candidate, proposer, engine, method, model, k, sched)
    return _sglang(candidate, proposer, engine, method, model, k, sched)


def _model(method: str | None, model: str | None, proposer: Any) -> str:
    if model is None or getattr(getattr(proposer, "model", None), "config_only", False):
        return f"<FILL IN: the {method} checkpoint id>"
    return model


def _vllm(c: Candidate, p: Any, engine: ServingEngine, method: str | None, model: str | None, k: int,
          sched: Schedule | None) -> EmittedConfig:
    if method is None:
        return EmittedConfig(c.name, engine.label, k, False, "", None, (
            f"{c.proposer} ({getattr(p, 'kind', '?')}) has no vLLM speculative method",))
    cfg: dict[str, Any] = {"method": method}
    if method not in ("ngram", "suffix", "mtp"):
        cfg["model"] = _model(method, model, p)
    cfg["num_speculative_tokens"] = k
    if method == "ngram":
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if getattr(p, key, None) is not None:
                cfg[key] = getattr(p, key)
    notes = []
    if sched is not None:
        cfg["num_speculative_tokens_per_batch_size"] = [list(r) for r in sched]
        notes += [f"k by batch size needs a vLLM release with {DSD_SOURCE}; vLLM turns it off with "
                  "data parallel > 1", COLLAPSE]
    if engine.full_width_drafts and method in ("ngram", "suffix"):
        notes.append(f"{engine.label} verifies all {k} slots even without a match (priced so); "
                     "a moderate k keeps that cost down")
    return EmittedConfig(c.name, engine.label, k, True, "--speculative-config (JSON)", cfg, tuple(notes))


def _trtllm(c: Candidate, p: Any, engine: ServingEngine, method: str | None, model: str | None, k: int,
            sched: Schedule | None) -> EmittedConfig:
    kind = _TRTLLM.get(method or "")
    if kind is None:
        return EmittedConfig(c.name, engine.label, k, False, "", None, (
            f"TensorRT-LLM has no decoding_type for {c.proposer} (vLLM method {method!r})",))
    spec: dict[str, Any] = {"decoding_type": kind}
    spec["num_nextn_predict_layers" if kind == "MTP" else "max_draft_len"] = k
    if kind in ("Eagle", "Eagle3", "DraftTarget"):
        spec["speculative_model_dir"] = _model(method, model, p)
    if kind == "NGram" and getattr(p, "prompt_lookup_max", None) is not None:
        spec["max_matching_ngram_size"] = p.prompt_lookup_max
    notes = []
    if sched is not None:
        last = max((i for i, (_, _, kk) in enumerate(sched) if kk > 0), default=len(sched) - 1)
        spec["draft_len_schedule"] = {end: kk for _, end, kk in sched[:last + 1]}
        notes += ["draft_len_schedule keys are the top of each batch range, k = 0 above the largest "
                  "(TensorRT-LLM's get_draft_len_for_batch_size; its first releases read keys as "
                  "lower thresholds: check your version)", COLLAPSE]
    return EmittedConfig(c.name, engine.label, k, True, "extra_llm_api_options (YAML)",
                         {"speculative_config": spec}, tuple(notes))


def _sglang(c: Candidate, p: Any, engine: ServingEngine, method: str | None, model: str | None, k: int,
            sched: Schedule | None) -> EmittedConfig:
    algo = _SGLANG.get(method or "")
    if algo is None:
        return EmittedConfig(c.name, engine.label, k, False, "", None, (
            f"SGLang has no speculative algorithm for {c.proposer} (vLLM method {method!r})",))
    if sched is not None:
        return EmittedConfig(c.name, engine.label, k, False, "", None, (
            "SGLang fixes the draft length at start-up: no k by batch size",
            "deployable instead: a fixed k, or two routes ([[two_routes]], docs/scenario-format.md)"))
    flags = ["--speculative-algorithm", algo]
    if algo != "NGRAM" and method != "mtp":
        flags += ["--speculative-draft-model-path", _model(method, model, p)]
    if algo != "NGRAM":
        flags += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
    flags += ["--speculative-num-draft-tokens", str(k + 1)]
    notes = ["a chain (topk 1): k drafts verified with the last verified token, k + 1 tokens per row"]
    if algo == "NGRAM":
        notes.append("SGLang's n-gram worker verifies every draft slot whether or not it matched (priced so)")
    if method == "mtp":
        notes.append("MTP layers run through SGLang's EAGLE worker from the target checkpoint")
    return EmittedConfig(c.name, engine.label, k, True, "server flags", flags, tuple(notes))


def candidate_config(scenario: Any, profile: Any, name: str) -> EmittedConfig | None:
    """The config of scenario candidate ``name`` on the engine its fleet names, resolved for its
    profile (``profile``: the [fleet]'s; a [fleets.NAME] candidate's own is loaded)."""
    from sim.model.engine_defaults import engine_limits
    from sim.model.k_schedule import resolve_candidate
    from sim.model.serving_engine import resolve
    from sim.results.runner import candidate_profiles

    cand = scenario.candidate(name)
    if not cand.speculates:
        return None
    prof = profile if cand.fleet is None else candidate_profiles(scenario, None, [cand])[cand.name]
    cand = resolve_candidate(scenario, prof, cand)  # schedule = "auto": the one the run computed
    own = scenario.for_candidate(cand)
    engine = resolve(own.fleet.engine, prof)
    top = int(engine_limits(own, prof).max_num_seqs)
    return emit(cand, prof.proposers.get(cand.proposer), engine, top)


def verdict_config(scenario: Any, profile: Any, answer: Any) -> EmittedConfig | None:
    """The config of the candidate the verdict names (``answer.whole.winner``); None when the
    verdict names none, or names one that does not speculate."""
    winner = answer.whole.winner
    return None if winner is None else candidate_config(scenario, profile, winner)


@dataclass(frozen=True)
class Deployability:
    """Whether the named engine runs a candidate as the simulator ran it, and what runs instead."""

    candidate: str
    engine: str
    runnable: bool
    twin: str = ""
    """Its deployable twin where it is not runnable: the [[two_routes]] that names it
    ``idealised``, else a runnable fixed-k candidate with its proposer and fleet, else the
    deployable form in words."""
    why: str = ""
    """Why the engine cannot run it (the emitted config's first note)."""


def deployability(scenario: Any, profiles: Any, names: Sequence[str] | None = None) -> dict[str, Deployability]:
    """Each speculative candidate of ``names`` (default: all) judged by ``emit`` for the engine
    its fleet names (``profiles``: the candidates' profiles by name, or one profile): the one
    rule the decision reads, so an idealised policy never wins over a runnable equal."""
    from sim.results.runner import candidate_profiles

    cands = [c for c in scenario.candidates if c.speculates and (names is None or c.name in names)]
    if not cands:
        return {}
    fixed = [c for c in scenario.candidates if c.speculates and c.policy == "fixed" and c not in cands
             and any(c.proposer == x.proposer and c.fleet == x.fleet for x in cands)]
    if isinstance(profiles, Mapping):  # the run's profiles; a twin not run is emitted on its fleet's
        fixed = [c for c in fixed if c.name in profiles or c.fleet is None]
        base = profiles.get(next((c.name for c in cands if c.fleet is None), ""))
        profiles = {**({c.name: base for c in fixed if c.fleet is None} if base else {}), **profiles}
    profs = candidate_profiles(scenario, profiles, [*cands, *fixed])
    emitted = {c.name: candidate_config(scenario, profs[c.name], c.name) for c in [*cands, *fixed]}
    out = {}
    for c in cands:
        e = emitted[c.name]
        if e is None or e.runnable or e.k == 0:  # k = 0 everywhere: it deploys as no speculation
            out[c.name] = Deployability(c.name, e.engine if e else "", True)
            continue
        out[c.name] = Deployability(c.name, e.engine, False, _twin(scenario, c, emitted),
                                    e.notes[0] if e.notes else "")
    return out


def _twin(scenario: Any, cand: Candidate, emitted: Mapping[str, EmittedConfig | None]) -> str:
    e = emitted.get(cand.name)
    if cand.policy == "fixed":  # not the policy: the engine has no method for its proposer
        return f"none on this engine ({e.notes[0] if e is not None and e.notes else 'no method for its proposer'})"
    route = next((r.name for r in scenario.two_routes if r.idealised == cand.name), None)
    if route is not None:
        return f"two routes {route}"
    same = [c for c in scenario.candidates if c.name != cand.name and c.speculates and c.policy == "fixed"
            and c.proposer == cand.proposer and c.fleet == cand.fleet
            and (e := emitted.get(c.name)) is not None and e.runnable]
    if same:
        best = min(same, key=lambda c: (abs((c.k or 0) - cand.max_k), c.name))
        return best.name
    return (f"a fixed k of {cand.proposer} (e.g. k = {cand.max_k}), or two routes "
            "([[two_routes]], docs/scenario-format.md)")


def with_engine(facts: Any, dep: dict[str, Deployability]) -> Any:
    """``facts`` with each candidate's runnability on its engine (unchanged without ``dep``)."""
    import dataclasses

    if not dep:
        return facts
    return dataclasses.replace(facts, candidates=tuple(
        dataclasses.replace(c, runnable=d.runnable, deployable=d.twin, engine=d.engine)
        if (d := dep.get(c.name)) is not None else c for c in facts.candidates))

"""Measure a proposer's acceptance on real prompts: one profile ``acceptance`` entry.

Why per segment and per request: acceptance differs by task, language and temperature (a summary
copies its source, free writing does not), and its spread across requests drives tail latency.
So every (task, language, temperature) gets its own counters, and every prompt its own row.

Counting: a step with a proposal is a draft of ``k_max`` positions (vLLM's ``num_drafts``);
positions a proposer left empty in a short n-gram match count as not accepted, so
``num_draft_tokens == num_drafts · k_max`` as docs/profile-format.md requires. Steps with no
proposal at all are not drafts (vLLM schedules them with one token); ``num_steps`` counts them
too, so the simulator knows the proposal rate.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from profiler.prompt_sets import Prompt, by_segment, encode_prompt
from profiler.proposers import Proposer
from profiler.speculative import SpecResult, speculative_generate
from sim.contracts.acceptance_interval import segment_uncertainty
from sim.contracts.errors import SpecplanError
from sim.model.acceptance import FEW_REQUESTS, mean_length_interval

DEFAULT_K_MAX = 6
"""Largest draft length measured; the simulator may ask for any k ≤ k_max."""
DEFAULT_TEMPERATURES = (0.0, 0.7)
# Sizing (SmolLM2-135M fp32, torch 1 thread on this shared 2-core CPU, k_max=6), measured per
# 32-token request: n-gram lookup 1.5 s, 6-layer self-draft 5.4 s (its LM head alone reads 113 MB
# per draft token). Use one torch thread on a shared machine: two threads were 5-20x slower here.
# Prompts per segment: 3 was the first default and too few to trust: on support/en its 3 prompts
# gave n-gram a mean acceptance length of 1.00 where 10 gave 1.07, and a validate run served
# 8 % more tokens per step than that profile predicted. 10 keeps the segment's 95 % interval
# visible (sim/acceptance.FEW_REQUESTS) at ~8 min for n-gram and ~27 min for the self-draft over
# 5 tasks x 3 languages x 2 temperatures; --quick measures 1 for a first look.
DEFAULT_MAX_NEW_TOKENS = 24
"""Tokens generated per prompt for the default profile."""
DEFAULT_PROMPTS_PER_SEGMENT = 10
QUICK_MAX_NEW_TOKENS = 16
QUICK_PROMPTS_PER_SEGMENT = 1

Progress = Callable[[int, int, str], None]
"""progress(done, total, label): called after each measured request."""


def _request_seed(seed: int, t_index: int, prompt: Prompt) -> int:
    """A request's seed depends on (seed, temperature index, prompt id), not on run order."""
    words = [seed, t_index, *prompt.id.encode("utf-8")]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


def _eos_ids(tokenizer: Any, model: torch.nn.Module) -> list[int]:
    ids: set[int] = set()
    for src in (getattr(tokenizer, "eos_token_id", None),
                getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(x) for x in src)
    return sorted(ids)


def default_provenance(target: Any, proposer: Proposer) -> dict[str, Any]:
    """Provenance when the caller (the profile CLI) gives none: this machine, now."""
    from profiler.device import device_facts, device_notes, library_versions

    dev = getattr(target, "device", None) or next(target.model.parameters()).device
    dtype = getattr(target, "dtype", None) or next(target.model.parameters()).dtype
    label = getattr(target, "label", None) or str(target.identity.get("id"))
    return {
        "method": "measured",
        "device": device_facts(dev),
        "dtype": str(dtype).removeprefix("torch."),
        "libraries": library_versions(),
        "models": {"target": label, proposer.name: _proposer_label(proposer)},
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": None,
        "citation": None,
        "notes": device_notes(dev),
    }


def _proposer_label(proposer: Proposer) -> str:
    ident = proposer.identity()
    if ident["kind"] == "ngram":
        return f"prompt lookup {ident['prompt_lookup_min']}..{ident['prompt_lookup_max']}"
    if ident["kind"] == "self_draft":
        return f"self-draft: {ident.get('note', ident['layers'])}"
    model = ident.get("model", {})
    sha = model.get("sha256")
    return f"{model.get('id')} sha256:{sha}" if sha else str(model.get("id"))


def segment_row(results: Sequence[SpecResult], key: dict[str, Any], k_max: int,
                rng: np.random.Generator | None = None) -> dict[str, Any]:
    """Aggregate the requests of one segment into the profile's segment object.

    With ``rng`` it also carries ``uncertainty``: the prompts measured and a bootstrap interval
    over them, per position (``sim.contracts.acceptance_interval``).

    Counting is vLLM's (``v1/spec_decode/metrics.py``): ``num_drafts`` counts only steps with a
    proposal; ``num_steps`` counts every verification step, so ``num_drafts / num_steps`` is the
    proposal rate (an n-gram lookup with no match proposes nothing and vLLM schedules the
    request with one token). A step with no proposal accepts nothing, so ``accepted_per_pos``
    is the same under either counting.
    """
    per_request = [
        {
            "num_drafts": r.num_drafts - r.num_empty_drafts,
            "num_steps": r.num_drafts,
            "accepted_per_pos": r.accepted_per_pos(),
        }
        for r in results
        if r.num_drafts > 0
    ]
    per_pos = [sum(row["accepted_per_pos"][i] for row in per_request) for i in range(k_max)]
    drafts = sum(row["num_drafts"] for row in per_request)
    row = {
        "segment": key,
        "num_drafts": drafts,
        "num_steps": sum(row["num_steps"] for row in per_request),
        "num_draft_tokens": drafts * k_max,
        "num_accepted_tokens": sum(per_pos),
        "accepted_per_pos": per_pos,
        "per_request": per_request,
    }
    if rng is not None and results:
        row["uncertainty"] = segment_uncertainty(row, rng, prompts=len(results))
    return row


def mean_acceptance_length(segment: dict[str, Any]) -> float:
    """vLLM's convention: 1 + accepted tokens / drafts (bonus token included)."""
    drafts = segment["num_drafts"]
    return 1.0 + segment["num_accepted_tokens"] / drafts if drafts else math.nan


def describe(entry: dict[str, Any]) -> list[str]:
    """One line per segment: key, drafts, mean acceptance length (with its bootstrap interval
    over prompts when there is one, else its 95 % half-width across requests), survival rates,
    prompts. A segment where no prompt drafted anything says so, not ``nan ± inf``."""
    lines = []
    for seg in entry["segments"]:
        key = seg["segment"]
        d = seg["num_drafts"]
        unc = seg.get("uncertainty") or {}
        prompts = unc.get("prompts", len(seg.get("per_request", [])))
        if not d:
            lines.append(f"{_label(key)}: no draft in {prompts} prompt(s) ({seg.get('num_steps', 0)} steps "
                         "without a proposal): acceptance unknown, simulated without speculation")
            continue
        rates = ", ".join(f"{a / d:.2f}" for a in seg["accepted_per_pos"])
        if unc.get("length_low") is not None:
            half = f" (95 % {unc['length_low'][-1]:.2f}–{unc['length_high'][-1]:.2f}, bootstrap over prompts)"
        else:
            interval = _segment_interval(seg)
            half = ("" if interval is None else f" ± {interval[1]:.2f}" if math.isfinite(interval[1])
                    else " (one prompt: no interval)")
        lines.append(
            f"{_label(key)}: {d} drafts, mean acceptance length {mean_acceptance_length(seg):.2f}{half}, "
            f"survival [{rates}], {prompts} prompts"
        )
    return lines


def _label(key: dict[str, Any]) -> str:
    return f"{key['task']}/{key['language']}/T={key['temperature']:g}"


def _segment_interval(seg: dict[str, Any]) -> tuple[float, float, int] | None:
    """mean_length_interval at k_max over a segment's per-request rows; None without rows."""
    rows = seg.get("per_request", [])
    if not rows:
        return None
    return mean_length_interval(
        [r["num_drafts"] for r in rows], np.array([r["accepted_per_pos"] for r in rows]),
        len(seg["accepted_per_pos"]),
    )


def precision_summary(entry: dict[str, Any]) -> str | None:
    """One line on how much data is behind the entry: fewest prompts in a segment, the segment
    whose mean acceptance length (at k_max) is least certain, and how many segments had no
    draft at all; None without rows."""
    worst: tuple[float, str] | None = None
    fewest: int | None = None
    no_draft = 0
    for seg in entry["segments"]:
        interval = _segment_interval(seg)
        if interval is None:
            continue
        _, h, n = interval
        fewest = n if fewest is None else min(fewest, n)
        if not seg["num_drafts"]:
            no_draft += 1
        elif worst is None or h > worst[0]:
            worst = (h, _label(seg["segment"]))
    if fewest is None:
        return None
    thin = "" if fewest >= FEW_REQUESTS else f" (under {FEW_REQUESTS}: raise --prompts-per-segment)"
    out = f"fewest requests in a segment {fewest}{thin}"
    if worst is not None:
        out += ("; one prompt in some segment: no interval, verdicts that depend on its acceptance "
                "are undetermined" if not math.isfinite(worst[0]) else
                f"; least certain mean acceptance length ± {worst[0]:.2f} (95%, {worst[1]})")
    if no_draft:
        out += f"; {no_draft} of {len(entry['segments'])} segments had no draft at all"
    return out


def add_intervals(doc: dict[str, Any], seed: int = 0) -> tuple[dict[str, Any], int]:
    """A copy of profile ``doc`` whose measured segments carry ``uncertainty`` computed from their
    own ``per_request`` rows (one row per prompt), for profiles written before issue 41; segments
    that have it, or have no rows (imported, published), are left as they are. Returns the copy
    and how many segments gained one."""
    import copy

    out = copy.deepcopy(doc)
    added = 0
    for entry in (out.get("acceptance") or {}).values():
        rng = np.random.default_rng(np.random.SeedSequence([seed, 41]).spawn(1)[0])
        n = 0
        for seg in entry.get("segments", []):
            if seg.get("uncertainty") is None and seg.get("per_request"):
                seg["uncertainty"] = segment_uncertainty(seg, rng)
                n += 1
        if n:
            entry["provenance"] = _with_notes(entry["provenance"], (
                f"uncertainty: bootstrap over the stored per_request rows (one per prompt) added "
                f"afterwards by specplan profile interval (seed {seed}) to {n} segment(s)"))
        added += n
    return out, added


def check_entry(entry: dict[str, Any], source: str = "acceptance") -> None:
    """The invariants of docs/profile-format.md "acceptance entries"; SpecplanError if broken."""
    k_max = entry.get("k_max")
    if not isinstance(k_max, int) or k_max < 1:
        raise SpecplanError(f"{source}: k_max: expected an integer >= 1, got {k_max!r}")
    if not entry.get("segments"):
        raise SpecplanError(f"{source}: segments: expected at least one segment")
    for i, seg in enumerate(entry["segments"]):
        at = f"{source}: segments[{i}]"
        _check_counts(seg, k_max, at, need_drafts=True)
        for j, row in enumerate(seg.get("per_request", [])):
            ap = row.get("accepted_per_pos")
            if not isinstance(ap, list) or len(ap) != k_max:
                raise SpecplanError(f"{at}.per_request[{j}].accepted_per_pos: expected {k_max} counts")
            _check_monotone(ap, row.get("num_drafts"), f"{at}.per_request[{j}]")


def _check_counts(seg: dict[str, Any], k_max: int, at: str, *, need_drafts: bool) -> None:
    ap = seg.get("accepted_per_pos")
    if not isinstance(ap, list) or len(ap) != k_max:
        raise SpecplanError(f"{at}.accepted_per_pos: expected {k_max} counts (k_max)")
    drafts = seg.get("num_drafts")
    _check_monotone(ap, drafts, at)
    steps = seg.get("num_steps", drafts)
    if need_drafts and not steps:
        raise SpecplanError(f"{at}.num_drafts: 0 drafts measured; nothing to simulate from")
    if not isinstance(steps, int) or (isinstance(drafts, int) and steps < drafts):
        raise SpecplanError(f"{at}.num_steps: expected an integer >= num_drafts={drafts}, got {steps!r}")
    if seg.get("num_accepted_tokens") != sum(ap):
        raise SpecplanError(f"{at}.num_accepted_tokens: must equal sum(accepted_per_pos)={sum(ap)}")
    if seg.get("num_draft_tokens") != drafts * k_max:
        raise SpecplanError(f"{at}.num_draft_tokens: must equal num_drafts·k_max={drafts * k_max}")


def _check_monotone(ap: list[Any], drafts: Any, at: str) -> None:
    if not isinstance(drafts, int) or drafts < 0:
        raise SpecplanError(f"{at}.num_drafts: expected a non-negative integer")
    if any(not isinstance(a, int) or a < 0 for a in ap):
        raise SpecplanError(f"{at}.accepted_per_pos: expected non-negative integers")
    if any(a < b for a, b in zip(ap, ap[1:], strict=False)):
        raise SpecplanError(f"{at}.accepted_per_pos: must be non-increasing, got {ap}")
    if ap and ap[0] > drafts:
        raise SpecplanError(f"{at}.accepted_per_pos[0]={ap[0]} exceeds num_drafts={drafts}")


def measure_acceptance(
    target: Any,
    proposer: Proposer,
    prompts: Sequence[Prompt],
    *,
    k_max: int = DEFAULT_K_MAX,
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    prompts_per_segment: int | None = DEFAULT_PROMPTS_PER_SEGMENT,
    seed: int = 0,
    progress: Progress | None = None,
    provenance: dict[str, Any] | None = None,
    on_result: Callable[[dict[str, Any], str, SpecResult], None] | None = None,
) -> dict[str, Any]:
    """Run speculative decoding on every (segment, temperature, prompt); return the entry.

    ``on_result(key, prompt_id, result)`` (optional) sees every request's result, e.g. to write
    an acceptance trace (``sim/contracts/acceptance_trace.py``: the accepted length of every step).

    ``target`` is a LoadedModel (``model``, ``tokenizer``, ``identity``). Prompts are grouped by
    (task, language); the first ``prompts_per_segment`` of each group are used (all when None).
    """
    temps = _checked_temperatures(target, prompts, k_max, temperatures, max_new_tokens, prompts_per_segment)
    tokenizer = target.tokenizer
    model = target.model
    groups = by_segment(prompts)
    if prompts_per_segment is not None:
        groups = {key: ps[:prompts_per_segment] for key, ps in groups.items()}
    encoded = _encoded(groups, tokenizer, getattr(model.config, "max_position_embeddings", None),
                       max_new_tokens, k_max)
    eos = _eos_ids(tokenizer, model)
    # the bootstrap's own stream: spawned from the seed, so the interval repeats with the profile
    boot_rng = np.random.default_rng(np.random.SeedSequence([seed, 41]).spawn(1)[0])
    total = len(temps) * sum(len(ps) for ps in groups.values())
    done = 0
    segments: list[dict[str, Any]] = []
    empty_steps = steps = 0
    vllm = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    generated = 0
    for t_index, temp in enumerate(temps):
        for (task, language), ps in groups.items():
            results: list[SpecResult] = []
            for p in ps:
                gen = torch.Generator().manual_seed(_request_seed(seed, t_index, p))
                res = speculative_generate(
                    model, proposer, encoded[p.id], max_new_tokens, k_max, temp, gen, eos
                )
                results.append(res)
                if on_result is not None:
                    on_result({"task": task, "language": language, "temperature": temp}, p.id, res)
                steps += res.num_drafts
                empty_steps += res.num_empty_drafts
                generated += len(res.tokens)
                for name, value in res.vllm_view().items():
                    vllm[name] += value
                done += 1
                if progress is not None:
                    progress(done, total, f"{proposer.name} {task}/{language} T={temp:g} {p.id}")
            key = {"task": task, "language": language, "temperature": temp}
            segments.append(segment_row(results, key, k_max, boot_rng))
    entry = {
        "provenance": _with_notes(
            provenance if provenance is not None else default_provenance(target, proposer),
            _counting_note(
                k_max, max_new_tokens, prompts_per_segment, seed, steps, empty_steps, vllm,
                generated,
            ),
        ),
        "k_max": k_max,
        "segments": segments,
    }
    check_entry(entry, f"acceptance[{proposer.name}]")
    return entry


def _checked_temperatures(target: Any, prompts: Sequence[Prompt], k_max: int, temperatures: Sequence[float],
                          max_new_tokens: int, prompts_per_segment: int | None) -> list[float]:
    """The temperatures as floats, after refusing what cannot be measured (one line each)."""
    if k_max < 1:
        raise SpecplanError(f"k_max={k_max}: must be at least 1")
    if max_new_tokens < 1:
        raise SpecplanError(f"max_new_tokens={max_new_tokens}: must be at least 1")
    if prompts_per_segment is not None and prompts_per_segment < 1:
        raise SpecplanError(f"prompts_per_segment={prompts_per_segment}: must be at least 1")
    temps = [float(t) for t in temperatures]
    if not temps or any(t < 0 or not math.isfinite(t) for t in temps):
        raise SpecplanError(f"temperatures={list(temperatures)}: need one or more values >= 0")
    if len(set(temps)) != len(temps):
        raise SpecplanError(f"temperatures={temps}: values must be distinct")
    identity = target.identity
    if identity.get("source") == "config-only":
        raise SpecplanError(
            f"{identity.get('id')}: random weights (config-only) accept nothing real; measure "
            "acceptance on a real model, or import/publish it"
        )
    if target.tokenizer is None:
        raise SpecplanError(f"{identity.get('id')}: no tokenizer, cannot encode prompts")
    if not prompts:
        raise SpecplanError("no prompts to measure acceptance on")
    return temps


def _encoded(groups: dict[Any, list[Prompt]], tokenizer: Any, max_pos: int | None, max_new_tokens: int,
             k_max: int) -> dict[str, list[int]]:
    """Token ids of every prompt used, refusing one that would not fit the model's context."""
    encoded: dict[str, list[int]] = {}
    for ps in groups.values():
        for p in ps:
            ids = encode_prompt(tokenizer, p.prompt)
            if max_pos and len(ids) + max_new_tokens + k_max + 1 > max_pos:
                raise SpecplanError(
                    f"prompt {p.id}: {len(ids)} tokens + {max_new_tokens} new exceed the model's "
                    f"{max_pos}-token context; shorten it or lower max_new_tokens"
                )
            encoded[p.id] = ids
    return encoded


def _counting_note(
    k_max: int,
    max_new_tokens: int,
    per_segment: int | None,
    seed: int,
    steps: int,
    empty: int,
    vllm: dict[str, int],
    generated: int,
) -> str:
    vllm_mal = (
        1 + vllm["num_accepted_tokens"] / vllm["num_drafts"] if vllm["num_drafts"] else math.nan
    )
    return (
        f"acceptance: speculative decoding with exact verification, k_max={k_max}, "
        f"{per_segment or 'all'} prompts/segment, <= {max_new_tokens} new tokens each "
        f"({generated} generated), seed {seed}; counted as vLLM does: a step with a proposal is "
        f"a draft of k_max positions (positions a short proposal left empty count as rejected), "
        f"steps with no proposal are not drafts (num_steps counts them); "
        f"{empty} of {steps} steps had no proposal (vLLM's own counters: "
        f"{vllm['num_drafts']} drafts, {vllm['num_draft_tokens']} draft tokens, "
        f"mean acceptance length {vllm_mal:.2f})"
    )


def _with_notes(provenance: dict[str, Any], note: str) -> dict[str, Any]:
    out = dict(provenance)
    prev = out.get("notes")
    out["notes"] = f"{prev}; {note}" if prev else note
    return out

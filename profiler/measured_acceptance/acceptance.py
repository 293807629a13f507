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

from profiler.measured_acceptance.acceptance_report import with_notes
from profiler.passes.proposers import Proposer
from profiler.passes.speculative import SpecResult, speculative_generate
from profiler.prompt_sets import Prompt, by_segment, encode_prompt
from sim.contracts.acceptance_interval import segment_uncertainty
from sim.contracts.errors import SpecplanError

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
    from profiler.passes.device import device_facts, device_notes, library_versions

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
        "provenance": with_notes(
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

"""The published acceptance specplan ships, per method, model family, task and k, each cited.

Why in code: the numbers are read once from their sources (never typed from memory) and kept
here with the citation; ``profiles/acceptance/*.json`` are generated from this table
(``python -m profiler.imported.published_library profiles/acceptance``) and a test checks they agree;
``specplan profile import-aiconfigurator`` takes :func:`published_for` as the default acceptance
of a (method, model family) the library covers. Precedence everywhere: measured > published >
assumed (docs/profile-format.md, "Acceptance").

Two shapes of source:

- ``lengths``: mean acceptance length per k (InferenceX's golden AL, one vLLM run per k),
  turned into per-position survival rates by :mod:`profiler.measured_acceptance.acceptance_lengths`;
- ``rates``: per-position survival rates as vLLM prints them (``acceptance rate at token i``);
- ``tau``: one mean acceptance length τ at one draft length ``k`` (a model card's table): spread
  over the ``k`` positions as ``published_tables`` spreads Spec-Bench's, with one per-token rate α
  (``s_i = α^i``, ``1 + Σ s_i = τ``). The shape is *assumed* and the notes say so; the counts
  put the rounding residue on position 1, so the entry's mean length is τ exactly.

Counts are nominal (``NOMINAL`` drafts): they set the resolution, not a sample size; no
per-request rows, so the spread across requests is unknown and every run says so.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from profiler.imported.published_tables import alpha_for
from profiler.measured_acceptance.acceptance_lengths import (
    lengths_from_rates,
    rates_from_lengths,
    round_trip_error,
)

NOMINAL = 10_000

INFERENCEX = (
    "SemiAnalysis InferenceX, golden acceptance-length table golden_al_distribution/{file} "
    "(SemiAnalysisAI/InferenceX, Apache-2.0, commit {commit}, {date}; source GitHub Actions run "
    "{run}): mean acceptance length AL = 1 + accepted draft tokens / drafts from vLLM's counters per "
    "num_speculative_tokens, rounded to 2 decimals; SPEED-Bench Qualitative split, 'coding' category "
    "(80 prompts, output_len 4096), one vLLM {method} server per k on NVIDIA B300"
)

TABLES: tuple[dict[str, Any], ...] = (
    {"name": "inferencex-deepseek-v4-pro-mtp", "kind": "mtp", "family": "deepseek-v4-pro",
     "model": "deepseek-v4-pro (FP4, collector dsv4_fp4_b300_vllm.sh)", "draft": "the model's own MTP module",
     "cite": {"file": "dsv4_mtp.yaml", "commit": "ab51b0612d3aec25a08196505334848b83987a45",
              "date": "2026-06-26", "run": "27180633016", "method": "MTP"},
     "segments": [
         {"task": "code-thinking", "temperature": 1.0, "mode": "thinking_on",
          "lengths": {1: 1.79, 2: 2.27, 3: 2.49, 4: 2.54, 5: 2.55, 6: 2.55, 7: 2.54, 8: 2.58}},
         {"task": "code", "temperature": 1.0, "mode": "thinking_off",
          "lengths": {1: 1.92, 2: 2.61, 3: 2.97, 4: 3.00, 5: 3.10, 6: 3.16, 7: 3.00, 8: 3.11}},
     ]},
    {"name": "inferencex-kimi-k2.5-eagle3", "kind": "eagle3", "family": "kimi-k2.5",
     "model": "kimi-k2.5-nvfp4", "draft": "an EAGLE-3 head (the collector's; the YAML does not name it)",
     "cite": {"file": "kimik2.5_eagle3.yaml", "commit": "ab51b0612d3aec25a08196505334848b83987a45",
              "date": "2026-06-26", "run": "28122195822", "method": "EAGLE3"},
     "segments": [
         {"task": "code-thinking", "temperature": 1.0, "mode": "thinking_on",
          "lengths": {1: 1.83, 2: 2.43, 3: 2.88, 4: 3.24, 5: 3.46, 6: 3.62, 7: 3.71, 8: 3.77}},
         {"task": "code", "temperature": 0.6, "mode": "thinking_off",
          "lengths": {1: 1.80, 2: 2.33, 3: 2.75, 4: 3.06, 5: 3.25, 6: 3.43, 7: 3.46, 8: 3.51}},
     ]},
    {"name": "inferencex-qwen3.5-397b-a17b-mtp", "kind": "mtp", "family": "qwen3.5-397b-a17b",
     "model": "qwen3.5-397b-a17b-nvfp4", "draft": "the model's own MTP module",
     "cite": {"file": "qwen3.5_mtp.yaml", "commit": "ab51b0612d3aec25a08196505334848b83987a45",
              "date": "2026-06-26", "run": "27317114007", "method": "MTP"},
     "segments": [
         {"task": "code-thinking", "temperature": 0.6, "mode": "thinking_on",
          "lengths": {1: 1.93, 2: 2.73, 3: 3.39, 4: 3.97, 5: 4.41, 6: 4.80, 7: 5.04, 8: 5.21}},
         {"task": "code", "temperature": 0.7, "mode": "thinking_off",
          "lengths": {1: 1.92, 2: 2.70, 3: 3.33, 4: 3.83, 5: 4.20, 6: 4.48, 7: 4.73, 8: 4.71}},
     ]},
    {"name": "inferencex-glm-5.2-mtp", "kind": "mtp", "family": "glm-5.2",
     "model": "glm-5.2-fp8 (as the YAML labels it; collector glm52_fp4_b300_vllm.sh)",
     "draft": "the model's own MTP module",
     "cite": {"file": "glm5.2_mtp.yaml", "commit": "79aa5d83ee65c5b259cd3cb711f94f6ec7cd8322",
              "date": "2026-08-02", "run": "28058352479", "method": "MTP"},
     "segments": [
         {"task": "code-thinking", "temperature": 1.0, "mode": "thinking_on",
          "lengths": {1: 1.84, 2: 2.50, 3: 2.99, 4: 3.33, 5: 3.61, 6: 3.78, 7: 3.91, 8: 4.06}},
     ]},
    {"name": "inferencex-minimax-m3-eagle3", "kind": "eagle3", "family": "minimax-m3",
     "model": "minimax-m3 (FP4, collector minimaxm3_fp4_b300_vllm.sh)", "draft": "Inferact/MiniMax-M3-EAGLE3",
     "cite": {"file": "minimaxm3_eagle3.yaml", "commit": "ab51b0612d3aec25a08196505334848b83987a45",
              "date": "2026-06-26", "run": "28061204145", "method": "EAGLE3"},
     "segments": [
         {"task": "code-thinking", "temperature": 1.0, "mode": "thinking_on",
          "lengths": {1: 1.78, 2: 2.38, 3: 2.83, 4: 3.11, 5: 3.35, 6: 3.45, 7: 3.53, 8: 3.74}},
         {"task": "code", "temperature": 1.0, "mode": "thinking_off",
          "lengths": {1: 1.84, 2: 2.52, 3: 2.93, 4: 3.41, 5: 3.59, 6: 3.57, 7: 3.85, 8: 4.06}},
     ]},
    {"name": "inferencex-minimax-m3-eagle3-gqa", "kind": "eagle3", "family": "minimax-m3",
     "model": "minimax-m3 (FP4, collector minimaxm3_fp4_b300_vllm.sh)",
     "draft": "a GQA EAGLE-3 head (InferenceX README: 'EAGLE3 (GQA)'); not the import's default for the family",
     "cite": {"file": "minimaxm3_eagle3_gqa.yaml", "commit": "85606a70014714b56f284c43bc269735e99b74e2",
              "date": "2026-07-29", "run": "29784780049", "method": "EAGLE3"},
     "segments": [
         {"task": "code-thinking", "temperature": 1.0, "mode": "thinking_on",
          "lengths": {1: 1.79, 2: 2.39, 3: 2.78, 4: 3.02, 5: 3.21, 6: 3.30, 7: 3.52, 8: 3.51}},
         {"task": "code", "temperature": 1.0, "mode": "thinking_off",
          "lengths": {1: 1.83, 2: 2.46, 3: 2.97, 4: 3.29, 5: 3.72, 6: 3.76, 7: 3.75, 8: 3.93}},
     ]},
    *({"name": f"vllm-ci-{fam}-eagle3", "kind": "eagle3", "family": fam, "model": model, "draft": draft,
       "citation": ("vLLM's EAGLE-3 acceptance regression test tests/v1/spec_decode/test_acceptance_length.py "
                    "(vllm-project/vllm, Apache-2.0, stored version at commit 51dacb53075127dae4a693f36b307cc9b02927db), "
                    f"EAGLE3_MODEL_CONFIGS '{cid}': expected_acceptance_lengths_per_pos {rates} (vLLM's "
                    f"accepted_per_pos / num_drafts) and expected_acceptance_length {al:.2f}; num_speculative_tokens 3, "
                    "80 MT-bench prompts (philschmid/mt-bench), temperature 0, 256 output tokens"),
       "segments": [{"task": "chat", "temperature": 0.0, "mode": None, "rates": rates}],
       "notes": (f"a regression baseline vLLM's CI holds runs to (5 % tolerance{extra}), measured by its authors "
                 "with examples/offline_inference/spec_decode.py; the GPU is not stated")}
      for fam, model, draft, cid, rates, al, extra in (
          ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3",
           "llama3-8b-eagle3", [0.7296, 0.5208, 0.3545], 2.60, ""),
          ("qwen3-8b", "Qwen/Qwen3-8B", "RedHatAI/Qwen3-8B-speculator.eagle3", "qwen3-8b-eagle3",
           [0.6541, 0.3993, 0.2020], 2.26, ""),
          ("gpt-oss-20b", "openai/gpt-oss-20b", "RedHatAI/gpt-oss-20b-speculator.eagle3", "gpt-oss-20b-eagle3",
           [0.7165, 0.5120, 0.3337], 2.56, ""),
          ("qwen3-vl-30b-a3b", "Qwen/Qwen3-VL-30B-A3B-Instruct-FP8", "nm-testing/Speculator-Qwen3-30B-MOE-VL-Eagle3",
           "qwen3-30b-moe-vl-eagle3", [0.2900, 0.0620, 0.0115], 1.35,
           "; 15 % per position; its rates sum to 1.36 against the 1.35 it states"),
      )),
    {"name": "nebius-card-llama-3.1-8b-eagle3", "kind": "eagle3", "family": "llama-3.1-8b",
     "model": "meta-llama/Llama-3.1-8B-Instruct", "draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (the EAGLE-3 authors' head)",
     "citation": ("Nebius, model card of nebius/EAGLE3-Llama-3.3-70B-Instruct (Hugging Face), table 'Comparison "
                  "with Public Checkpoints', row yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: average acceptance length "
                  "tau MT-bench 2.77, HumanEval 3.49, GSM8K 3.34, 'Measured at temperature = 1 with K = 7'; the "
                  "card says its acceptance was 'measured with proper rejection sampling' (not vLLM's greedy "
                  "draft sampling, vllm-project/vllm#20459)"),
     "segments": [{"task": "chat", "temperature": 1.0, "mode": "MT-bench", "tau": (7, 2.77)},
                  {"task": "code", "temperature": 1.0, "mode": "HumanEval", "tau": (7, 3.49)},
                  {"task": "math", "temperature": 1.0, "mode": "GSM8K", "tau": (7, 3.34)}],
     "notes": ("K = 7 draft tokens in a chain, as vLLM's num_speculative_tokens (the card's usage; it names no "
               "tree); engine version and GPU not stated; not the import's default for the family (vLLM's CI "
               "baseline at temperature 0 comes first): merge it (specplan profile merge) to plan at "
               "temperature 1 on these tasks")},
    {"name": "vllm-pr24243-minicpm3-eagle3", "kind": "eagle3", "family": "minicpm3",
     "model": "MiniCPM3 (the PR names the model, not the checkpoint)", "draft": "the PR's EAGLE-3 head for MiniCPM3",
     "citation": ("vLLM pull request #24243 'Eagle3 that supports the Minicpm3 model' (LDLINGLINGLING, "
                  "description of 2025-09-04, merged), Test Plan, first run: 200 samples, concurrency 10, "
                  "one RTX 4090; 'Acceptance rate at token 0..4' = 0.58, 0.34, 0.22, 0.15, 0.11; "
                  "43,221 drafts, 259,326 draft tokens, 63,669 accepted, mean acceptance length 2.47"),
     "segments": [
         {"task": "unspecified", "temperature": 0.0, "mode": None,
          "rates": [0.58, 0.34, 0.22, 0.15, 0.11]},
     ],
     "notes": ("rates as printed (vLLM's per-position acceptance: unconditional survival); the run drafted "
               "k=6 (259,326 / 43,221) but printed 5 positions, so position 6 (about 1.473 - 1.40 = 0.07 "
               "from the counters) is left out; the prompts' task and the temperature are not stated "
               "(segment entered as unspecified:any:0)")},
)


def family_of(model_id: str) -> str:
    """``nvidia/DeepSeek-V4-Pro-NVFP4`` -> ``deepseek-v4-pro``: the checkpoint's name without its
    organisation, a weight-format or ``-Instruct`` suffix (the tables were measured on one format
    of a family; the import prices a base and an instruct checkpoint alike, aic_database.ALIASES)."""
    name, prev = model_id.rstrip("/").split("/")[-1].lower().removeprefix("meta-"), ""
    while name != prev:  # "Qwen3-VL-30B-A3B-Instruct-FP8": format, then tuning
        prev, name = name, re.sub(r"-(nvfp4|fp8|fp4|bf16|awq|int4|instruct)$", "", name)
    return name


def _citation(table: dict[str, Any]) -> str:
    if "citation" in table:
        return table["citation"]
    return INFERENCEX.format(**table["cite"])


def _segment(seg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    if "tau" in seg:
        k, tau = int(seg["tau"][0]), float(seg["tau"][1])
        a = alpha_for(tau, k)
        per_pos = [round(a ** i * NOMINAL) for i in range(1, k + 1)]
        per_pos[0] += round((tau - 1) * NOMINAL) - sum(per_pos)  # the entry's mean length is tau exactly
        how = (f"{seg['mode']}: tau {tau:.2f} at k={k} (the source's only acceptance number) -> survival "
               f"alpha^i with alpha={a:.4f}: per-position shape assumed (one rate per token)")
        return {"segment": {"task": seg["task"], "language": "any", "temperature": float(seg["temperature"])},
                "num_drafts": NOMINAL, "num_draft_tokens": NOMINAL * k, "num_accepted_tokens": sum(per_pos),
                "accepted_per_pos": per_pos, "per_request": []}, how
    if "lengths" in seg:
        lengths = {int(k): float(v) for k, v in seg["lengths"].items()}
        rates = rates_from_lengths(lengths)
        err = round_trip_error(lengths, rates)
        how = (f"{seg['mode']}: AL per k {[lengths[k] for k in sorted(lengths)]} -> survival "
               f"{[round(r, 4) for r in rates]} (increments AL(k) - AL(k-1)"
               + (f", made non-increasing and >= 0: lengths back within {err:.3f} of the table)"
                  if err > 5e-3 else ", already non-increasing: the lengths come back as printed)"))
    else:
        rates = [float(r) for r in seg["rates"]]
        how = f"survival {rates} as printed, mean acceptance length {lengths_from_rates(rates)[-1]:.2f} at k={len(rates)}"
    per_pos = [round(r * NOMINAL) for r in rates]
    return {"segment": {"task": seg["task"], "language": "any", "temperature": float(seg["temperature"])},
            "num_drafts": NOMINAL, "num_draft_tokens": NOMINAL * len(per_pos),
            "num_accepted_tokens": sum(per_pos), "accepted_per_pos": per_pos, "per_request": []}, how


def entry(table: dict[str, Any], command: str | None = "python -m profiler.imported.published_library") -> dict[str, Any]:
    """One profile acceptance entry (method ``published``) for a table of :data:`TABLES`."""
    segs, hows = zip(*(_segment(s) for s in table["segments"]), strict=True)
    k_max = max(len(s["accepted_per_pos"]) for s in segs)
    for s in segs:  # one k_max per entry (the profile format's rule)
        if len(s["accepted_per_pos"]) != k_max:
            raise ValueError(f"{table['name']}: segments of one entry need the same k")
    notes = [f"{table['kind']} of {table['model']}, draft {table['draft']}", *hows,
             f"counts nominal ({NOMINAL} drafts per segment), not observations",
             "segments entered for any language (the source's prompts are English or their language unstated)",
             "no per-request rows: spread across requests unknown"]
    if table.get("notes"):
        notes.append(table["notes"])
    return {"provenance": {"method": "published", "models": {"target": table["model"], "draft": table["draft"]},
                           "date": None, "command": command, "citation": _citation(table),
                           "notes": "; ".join(notes)},
            "k_max": k_max, "segments": list(segs)}


def published_for(kind: str, target: str) -> tuple[str, dict[str, Any]] | None:
    """The first table for proposer ``kind`` on ``target``'s model family, as ``(table name,
    entry)``; None when the library has none (then measured counters or an assumption)."""
    fam = family_of(target)
    for table in TABLES:
        if table["kind"] == kind and table["family"] == fam:
            return table["name"], entry(table, command=None)
    return None


KEPT = ("measured", "imported", "published")
"""Acceptance methods a library table never replaces (measured > published > assumed)."""


def prefer_published(profile: dict[str, Any], command: str | None) -> list[str]:
    """Give each proposer of ``profile`` (a profile dict, changed in place) without measured,
    imported or published acceptance the library's table for its kind on the target's family.
    Returns one line per entry replaced or added, for the command to print."""
    said = []
    target = profile["target"]["id"]
    for name, ident in profile.get("proposers", {}).items():
        old = profile.setdefault("acceptance", {}).get(name)
        if old is not None and old["provenance"]["method"] in KEPT:
            continue
        found = published_for(ident.get("kind", ""), target)
        if found is None:
            continue
        table, new = found
        was = f"replaces an {old['provenance']['method']} entry" if old else "no entry before"
        new["provenance"]["command"] = command
        new["provenance"]["notes"] = (f"the default for {ident.get('kind')} on {target}: published table {table} "
                                      f"(profiler/imported/published_library.py; precedence measured > published > assumed; "
                                      f"{was}); " + new["provenance"]["notes"])
        profile["acceptance"][name] = new
        said.append(f"acceptance {name}: published table {table} ({was})")
    return said


def documents() -> dict[str, dict[str, Any]]:
    """File name -> ``specplan.acceptance`` document, one per table."""
    out = {}
    for t in TABLES:
        out[f"{t['name']}.json"] = {
            "schema": "specplan.acceptance", "name": t["name"], "target": t["model"],
            "proposers": {t["name"]: {"kind": t["kind"], "note": f"{t['draft']} for {t['model']}"}},
            "acceptance": {t["name"]: entry(t)},
        }
    return out


if __name__ == "__main__":
    folder = Path(sys.argv[1])
    for fname, doc in documents().items():
        (folder / fname).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {folder / fname}")

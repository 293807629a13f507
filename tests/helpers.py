"""Small builders shared by several test modules (no torch at import time)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from sim.contracts.synthetic import synthetic_profile_dict

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_module(name: str) -> Any:
    """A ``bench/`` script loaded as a module (they are scripts, not a package), so a test can call
    the very functions the documented command runs."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BASELINE: dict[str, Any] = {"name": "baseline", "speculation": "off"}
NGRAM_K2: dict[str, Any] = {"name": "ngram-k2", "proposer": "ngram", "k": 2}
NGRAM_K3: dict[str, Any] = {"name": "ngram-k3", "proposer": "ngram", "k": 3}


def segment(name: str = "chat", share: float = 1.0, prompt: int | dict[str, Any] = 64,
            output: int | dict[str, Any] = 16, task: str = "chat", language: str = "en") -> dict[str, Any]:
    """One ``[[workload.segments]]`` table; an int length means ``{dist = "fixed", value = N}``."""
    def dist(v: int | dict[str, Any]) -> dict[str, Any]:
        return {"dist": "fixed", "value": v} if isinstance(v, int) else v

    return {"name": name, "share": share, "prompt_tokens": dist(prompt), "output_tokens": dist(output),
            "acceptance": {"task": task, "language": language}}


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"


def scenario_toml(name: str, *, run: dict[str, Any], workload: dict[str, Any],
                  segments: list[dict[str, Any]], fleet: dict[str, Any] | None = None,
                  candidates: list[dict[str, Any]] = (), slo: dict[str, Any] | None = None,
                  engine: dict[str, Any] | None = None, description: str | None = None) -> str:
    """The text of a small scenario (docs/scenario-format.md), one table after another: the one
    builder tests use instead of pasting scenario TOML into every module."""
    lines = ["", f"name = {_toml(name)}"]
    if description is not None:
        lines.append(f"description = {_toml(description)}")

    def table(header: str, body: dict[str, Any]) -> None:
        lines.append(header)
        lines.extend(f"{k} = {_toml(v)}" for k, v in body.items())

    table("[run]", run)
    table("[workload]", workload)
    for seg in segments:
        table("[[workload.segments]]", seg)
    if slo is not None:
        table("[slo]", slo)
    if fleet is not None:
        table("[fleet]", fleet)
    if engine is not None:
        table("[fleet.engine]", engine)
    for cand in candidates:
        table("[[candidates]]", cand)
    return "\n".join(lines) + "\n"


MINIMAL_SCENARIO = scenario_toml(
    "t", run={"duration_s": 100}, workload={"arrival": "poisson", "rate": 1.0},
    segments=[segment("a", 1, prompt=10, output=5, task="support")],
)
"""The smallest valid scenario: one segment, fixed lengths, no fleet or candidates (validation
tests edit one field of it)."""


def write_text(folder: Path, text: str, name: str = "s.toml") -> Path:
    """``text`` written as ``folder/name`` (UTF-8); its path."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def spec_against_plain(folder: Path, profile: dict[str, Any], name: str = "doubt", *,
                       run: dict[str, Any] | None = None, slo: dict[str, Any] | None = None,
                       max_num_seqs: int = 16) -> Path:
    """``profile`` written to ``folder/profiles/p.json`` and a scenario beside it that runs an n-gram
    k = 3 candidate against plain decoding at 2 req/s on four seeds (32-token prompts, 30–60
    output tokens): the question whose verdict the doubt checks re-ask at an input's ends
    (``run`` and ``slo``: that table instead, for a capacity question)."""
    import json

    (folder / "profiles").mkdir(parents=True, exist_ok=True)
    (folder / "scenarios").mkdir(exist_ok=True)
    (folder / "profiles" / "p.json").write_text(json.dumps(profile), encoding="utf-8")
    text = scenario_toml(
        name, run=run or {"duration_s": 120.0, "warmup_s": 5, "seeds": [1, 2, 3, 4], "max_seeds": 4},
        workload={"arrival": "poisson", "rate": 2.0},
        segments=[{"name": "chat", "share": 1.0, "prompt_tokens": {"dist": "fixed", "value": 32},
                   "output_tokens": {"dist": "uniform", "min": 30, "max": 60},
                   "acceptance": {"task": "chat", "language": "en"}}],
        fleet={"profile": "../profiles/p.json"}, engine={"max_num_seqs": max_num_seqs},
        candidates=[{"name": "baseline", "speculation": "off"}, {"name": "spec", "proposer": "ngram", "k": 3}],
        **({"slo": slo} if slo else {}))
    (folder / "scenarios" / "s.toml").write_text(text, encoding="utf-8")
    return folder / "scenarios" / "s.toml"


def load_scenario_text(folder: Path, text: str) -> Any:
    """The scenario that ``text`` describes, loaded through the file path users take."""
    from sim.contracts.scenario import load_scenario

    return load_scenario(write_text(folder, text))


def write_scenario(
    folder: Path, scenario_toml: str, *, profile_file: str = "profile.json",
    scenario_file: str = "s.toml", **profile_args: Any,
) -> Path:
    """Write ``synthetic_profile_dict(**profile_args)`` as ``folder/profile_file`` and the
    scenario text (whose ``fleet.profile`` names that file) as ``folder/scenario_file``; return
    the scenario's path."""
    (folder / profile_file).write_text(json.dumps(synthetic_profile_dict(**profile_args)), encoding="utf-8")
    path = folder / scenario_file
    path.write_text(scenario_toml, encoding="utf-8")
    return path


def tiny_llama(seed: int, *, vocab: int, layers: int = 4, hidden: int = 32,
               max_positions: int = 512) -> Any:
    """A tiny random Llama in float64 (batched and one-token passes agree to ~1e-15, so greedy
    argmax never flips on rounding); ``seed`` fixes its weights only."""
    import torch
    import transformers

    torch.manual_seed(seed)  # model init only; decoding uses explicit generators
    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        initializer_range=0.5,  # sharper distributions than the default 0.02
    )
    return transformers.LlamaForCausalLM(cfg).to(torch.float64).eval()


def sent_tokens(n: int, c: int, layout: str) -> list[int]:
    """Oracle, written from the rule's text rather than from the code: the 0-based token indices
    after which a chunk leaves the server (vLLM's --stream-interval: token 0 alone, then every
    c-th, and the last; a buffering proxy: every c-th from the first on, and the last)."""
    if layout == "first-alone":
        return sorted({0, *range(c, n - 1, c), n - 1})
    return sorted({*range(c - 1, n - 1, c), n - 1})


def trace_scenario_path(folder: Path, rows: list[dict[str, Any]], *, duration_s: float, warmup_s: float = 0.0,
                        trace: dict[str, Any] | None = None, replicas: int = 1, seeds: tuple[int, ...] = (1,),
                        slo: dict[str, Any] | None = None, engine: dict[str, Any] | None = None,
                        candidates: list[dict[str, Any]] | None = None, **profile_args: Any) -> Path:
    """A scenario replaying ``rows`` (Mooncake JSONL, e.g. ``sim.contracts.synthetic_trace``)
    from ``folder/bursty.jsonl`` on a synthetic profile; returns the scenario's path."""
    from sim.contracts.synthetic_trace import write_jsonl

    write_jsonl(rows, folder / "bursty.jsonl")
    text = scenario_toml(
        "bursty", run={"duration_s": duration_s, "warmup_s": warmup_s, "seeds": list(seeds)},
        workload={"arrival": "trace", "trace": {"path": "bursty.jsonl", **(trace or {})}},
        segments=[{"name": "chat", "share": 1.0, "acceptance": {"task": "chat", "language": "en"}}],
        slo=slo or {"ttft_ms": 2000, "percentile": 95},
        fleet={"profile": "profile.json", "replicas": replicas}, engine=engine,
        candidates=candidates or [BASELINE])
    return write_scenario(folder, text, **profile_args)

class LinearEngine:
    """Per-op ms of one pass, linear in rows: ``gemm`` (every op but attention and the LM head),
    ``attention`` (per row and cached token) and ``logits_gemm`` (per scored row)."""

    model_path = "fake/linear"

    def __init__(self, gemm: float = 0.0, attn: float = 0.0, logits: float = 0.0) -> None:
        self.gemm, self.attn, self.logits = gemm, attn, logits

    def decode_ops(self, rows: int, context: int) -> dict[str, float]:
        return {"gemm": self.gemm * rows, "attention": self.attn * rows * context, "logits_gemm": self.logits * rows}

    def context_ops(self, batch: int, tokens: int, prefix: int) -> dict[str, float]:
        return {"gemm": self.gemm * batch * tokens, "attention": self.attn * batch * tokens * (prefix + tokens),
                "logits_gemm": self.logits * batch}

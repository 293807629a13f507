"""NVIDIA's measured-kernel database (PyPI ``aiconfigurator-core``) behind one small interface.

Why a wrapper: the package is an optional extra (``specplan[gpu-data]``) and its API is wide;
the importer needs only "what does the database cover", "compile a model for a system" and
"the time of each op of one pass". Everything the package raises on bad input becomes one
``SpecplanError`` line naming the value and what is valid. All times here are milliseconds, as
the package returns them; the importer converts to seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from profiler.imported import aic_routing
from sim.contracts.errors import SpecplanError

INSTALL_HINT = "aiconfigurator-core is not installed: pip install 'specplan[gpu-data]'"
BACKENDS = ("vllm", "sglang", "trtllm")

# Models specplan knows a config.json for that the package's own cache lacks (drafts).
EXTRA_CONFIGS = {"meta-llama/Llama-3.2-1B": "llama-3.2-1b.json"}
# What users type -> the package's cached id.
ALIASES = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.2-1B-Instruct": "meta-llama/Llama-3.2-1B",
}


def require_package() -> Any:
    """The imported ``aiconfigurator_core`` module, or the one-line install hint."""
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk import engine  # noqa: F401
    except ImportError:
        raise SpecplanError(INSTALL_HINT) from None
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    import aiconfigurator_core

    return aiconfigurator_core


def package_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")


@cache
def supported() -> dict[str, dict[str, list[str]]]:
    """system -> backend -> queryable versions, as the installed database declares them."""
    require_package()
    from aiconfigurator_core.sdk import perf_database

    with _quiet():
        raw = perf_database.get_supported_databases()
    return {s: {b: list(v) for b, v in sorted(bs.items()) if v} for s, bs in sorted(raw.items()) if bs}


def cached_models() -> list[str]:
    """Model ids whose config.json ships with the package, plus specplan's draft configs."""
    require_package()
    from aiconfigurator_core.sdk.common import DefaultHFModels

    return sorted(set(DefaultHFModels) | set(EXTRA_CONFIGS))


def resolve_version(system: str, backend: str, version: str | None) -> str:
    """The literal database version for (system, backend); bad values name what is valid."""
    cover = supported()
    if system not in cover:
        raise SpecplanError(f"--system {system!r}: not in the installed database (valid: {', '.join(cover)})")
    if backend not in cover[system]:
        have = ", ".join(cover[system]) or "none"
        raise SpecplanError(f"--backend {backend!r}: no {backend} data for {system} (valid: {have})")
    versions = cover[system][backend]
    if version is None:
        from aiconfigurator_core.sdk import perf_database

        slots = perf_database.get_version_slots(system, backend) or {}
        return slots.get("current", versions[-1])
    if version not in versions:
        raise SpecplanError(
            f"--backend-version {version!r}: not a queryable {backend} version on {system} (valid: {', '.join(versions)})"
        )
    return version


def collection_meta(system: str, backend: str, version: str) -> dict[str, Any]:
    """The database's own ``collection_meta.yaml`` runtime and table status, per op family."""
    import yaml

    root = Path(resources.files("aiconfigurator_core")) / "systems" / "data" / system
    out: dict[str, Any] = {}
    for meta in sorted(root.glob(f"*/{backend}/{version}/collection_meta.yaml")):
        doc = yaml.safe_load(meta.read_text()) or {}
        tables = doc.get("tables") or {}
        out[meta.parts[-4]] = {
            "provenance": doc.get("provenance"),
            "runtime": doc.get("runtime"),
            "tables": {t: (v or {}).get("status") for t, v in tables.items()},
        }
    return out


def model_config(model: str) -> dict[str, Any]:
    """The HF config.json of ``model`` (package cache, specplan's drafts or a local folder)."""
    mid = ALIASES.get(model, model)
    if mid in EXTRA_CONFIGS:
        text = (resources.files("profiler") / "builtin_configs" / EXTRA_CONFIGS[mid]).read_text()
        return {k: v for k, v in json.loads(text).items() if not k.startswith("_")}
    if os.path.isdir(mid) and os.path.isfile(os.path.join(mid, "config.json")):
        return json.loads(Path(mid, "config.json").read_text())
    require_package()
    from aiconfigurator_core.sdk.common import DefaultHFModels

    if mid not in DefaultHFModels:
        import difflib

        ids = cached_models()
        near = difflib.get_close_matches(model, ids, n=3, cutoff=0.5)
        raise SpecplanError(
            f"model {model!r}: the installed database has no config for it (valid: one of its {len(ids)} model ids, "
            f"which `--target list` prints{', e.g. ' + ', '.join(near) if near else ''}; or a local folder "
            "holding config.json)"
        )
    from aiconfigurator_core.sdk.utils import _load_pre_downloaded_hf_config

    return dict(_load_pre_downloaded_hf_config(mid))


def quant_config(model: str) -> tuple[dict[str, Any] | None, str]:
    """The checkpoint's quantization config as vLLM reads it, and where it came from:
    config.json's ``quantization_config`` (or its text_config's), else ``hf_quant_config.json``."""
    cfg = model_config(model)
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    for where, holder in (("config.json", cfg), ("config.json text_config", text)):
        if isinstance(holder.get("quantization_config"), dict):
            return holder["quantization_config"], f"{where} quantization_config"
    mid = ALIASES.get(model, model)
    path = Path(mid, "hf_quant_config.json")
    if mid not in EXTRA_CONFIGS and os.path.isdir(mid) and path.is_file():
        return json.loads(path.read_text()), "hf_quant_config.json"
    if mid not in EXTRA_CONFIGS and not os.path.isdir(mid):
        from aiconfigurator_core.sdk.utils import _load_pre_downloaded_hf_quant_config

        found = _load_pre_downloaded_hf_quant_config(mid)
        if isinstance(found, dict):
            return found, "hf_quant_config.json"
    return None, "none"


@dataclass
class Engine:
    """A model compiled for one system/backend/version/TP: per-op times of one pass, in ms."""

    handle: Any
    model_path: str
    system: str
    backend: str
    version: str
    tp: int
    routing: str | None = None
    """The MoE rows its expert op was timed from (None: no routed experts); a line for the notes."""

    def decode_ops(self, rows: int, context: int) -> dict[str, float]:
        """Op name -> ms for a decode pass over ``rows`` sequences of one token at ``context``."""
        try:
            return _fold(self.handle.decode_step_per_op(rows, max(int(context), 1), 2))
        except Exception as exc:  # the package's Rust and Python errors alike; ours is one line
            raise SpecplanError(self._missing(exc)) from None

    def context_ops(self, batch: int, tokens: int, prefix: int) -> dict[str, float]:
        """Op name -> ms for a prefill pass of ``batch`` chunks of ``tokens`` after ``prefix``."""
        try:
            ctx, _gen = self.handle.run_static_per_op(batch_size=batch, isl=prefix + tokens, osl=1, prefix=prefix)
        except Exception as exc:
            raise SpecplanError(self._missing(exc)) from None
        return _fold(ctx)

    def _missing(self, exc: Exception) -> str:
        """What the database lacks for this model, named without the package's internals."""
        msg = str(exc)
        kind = re.search(r"(\w+) data missing", msg)
        quant = re.search(r'quant: "?(\w+)"?', msg)
        what = (f"its {kind.group(1)} kernels" if kind else "one of its ops") + (f" at quant {quant.group(1)}" if quant else "")
        return (f"{self.model_path} on {self.system}/{self.backend} {self.version} tp={self.tp}: the database has no "
                f"timings for {what} (valid: another --dtype or --kv-cache-dtype, --system or --backend-version; "
                "`--system list` and "
                "`--target list` show what it covers)")

    def mixed_ms(self, prefill_tokens: int, decode_rows: int, isl: int) -> float:
        """The package's own fused mixed-step latency (for checking our composition)."""
        return float(self.handle.mixed_step_latency(prefill_tokens, decode_rows, isl, 2, 0))


@dataclass(frozen=True)
class Layout:
    """How a replica runs a model: attention TP width, the experts' TP x EP split, and the
    package's quant modes (None: what the checkpoint's config says)."""

    tp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    gemm: str | None = None
    moe: str | None = None
    kv: str | None = None

    def kwargs(self, experts: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"tp_size": self.tp}
        if experts:
            out.update(moe_tp_size=self.moe_tp, moe_ep_size=self.moe_ep)
        for key, val in (("gemm_quant_mode", self.gemm), ("moe_quant_mode", self.moe if experts else None),
                         ("kvcache_quant_mode", self.kv)):
            if val is not None:
                out[key] = val
        return out


def num_experts(cfg: dict[str, Any]) -> int:
    """Routed experts of a config (0: dense)."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if isinstance(text.get(key), int) and text[key] > 1:
            return int(text[key])
    return 0


def check_layout(model: str, cfg: dict[str, Any], layout: Layout) -> None:
    """Attention heads and experts divide as the package requires; one line naming valid values."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    heads, kv = int(text.get("num_attention_heads", 0)), int(text.get("num_key_value_heads", 0) or 0)
    tp = layout.tp
    if tp < 1 or (heads and heads % tp):
        raise SpecplanError(f"--tp {tp}: {model} has {heads} attention heads; TP must divide them (valid: "
                            f"{', '.join(str(t) for t in (1, 2, 4, 8) if heads % t == 0)})")
    if kv and tp > kv and tp % kv:
        raise SpecplanError(f"--tp {tp}: {model} has {kv} KV heads; TP must divide or be a multiple of them")
    experts = num_experts(cfg)
    ep = layout.moe_ep
    if not experts and ep != 1:
        raise SpecplanError(f"--ep {ep}: {model} is a dense model with no experts (valid: --ep 1)")
    if experts and (ep < 1 or tp % ep or experts % ep or layout.moe_tp * ep != tp):
        valid = [e for e in range(1, tp + 1) if tp % e == 0 and experts % e == 0]
        raise SpecplanError(f"--ep {ep}: {model} has {experts} experts on --tp {tp} GPUs; expert parallelism must "
                            f"divide both (the experts' TP x EP = {tp}; valid: --ep {', '.join(map(str, valid))})")


def _model_path(model: str) -> tuple[str, tempfile.TemporaryDirectory | None]:
    """A path the package can read: its own cached id, or a temporary folder with config.json."""
    mid = ALIASES.get(model, model)
    if mid in EXTRA_CONFIGS or mid not in cached_models():
        tmp = tempfile.TemporaryDirectory()
        Path(tmp.name, "config.json").write_text(json.dumps(model_config(model)))
        return tmp.name, tmp
    return mid, None


def compile_engine(model: str, system: str, backend: str, version: str, layout: Layout,
                   label: str | None = None) -> Engine:
    """Compile ``model`` (an id or config folder) for the database; one line on bad input.
    ``label`` names it in errors instead (a head priced from a temporary config folder)."""
    require_package()
    from aiconfigurator_core.sdk.engine import EngineHandle

    cfg = model_config(model)
    name = label or ALIASES.get(model, model)
    check_layout(name, cfg, layout)
    moe = bool(num_experts(cfg))
    path, tmp = _model_path(model)
    try:
        with _quiet():
            handle, routing, why = None, None, aic_routing.ROUTED_FAMILIES.get(str(cfg.get("model_type"))) if moe else None
            if why:  # uniform routing where measured runs of the family say so; else the package's default
                handle = aic_routing.compile_routed(EngineHandle, path, system, backend, version, layout)
                routing = (f"routed experts timed from the database's '{aic_routing.ROUTING}' MoE rows (uniform routing, as "
                           f"sim/contracts/expert_traffic.py assumes), chosen for {cfg.get('model_type')}: {why}")
            if handle is None:
                handle = EngineHandle.compile(path, system, backend, backend_version=version, **layout.kwargs(moe))
                if moe:
                    routing = ("routed experts timed from the package's default MoE rows (a power-law routing: fewer "
                               "distinct experts at a few tokens than the uniform routing the floor assumes)"
                               + (f"; no '{aic_routing.ROUTING}' rows for this shape" if why else ""))
    except (ValueError, AssertionError, KeyError, NotImplementedError, RuntimeError) as exc:
        raise SpecplanError(_refusal(name, system, backend, version, layout, exc)) from None
    finally:
        if tmp is not None:
            tmp.cleanup()
    return Engine(handle, name, system, backend, version, layout.tp, routing)



def _refusal(model: str, system: str, backend: str, version: str, layout: Layout, exc: BaseException) -> str:
    """The package's refusal in our words: the model, the values asked for, what to change."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low = msg.lower()
    asked = f"{model} on {system}/{backend} {version} tp={layout.tp}"
    if "quant" in low or "not supported" in low or "no data" in low or "table" in low:
        return (f"{asked}, weights {layout.gemm or 'auto'}, KV cache {layout.kv or 'auto'}: the database has no "
                f"kernel timings for this combination (valid: another --dtype / --kv-cache-dtype, --system or "
                f"--backend-version; `--system list` shows what it covers)")
    return f"{asked}: the database cannot model it ({msg[:160]})"


def resolved_quant(model: str, backend: str, layout: Layout) -> dict[str, str]:
    """The quant modes the package settles on (a flag, else the checkpoint's config): what the
    profile's dtype labels must say, e.g. DeepSeek-V3's fp8 blocks and fp8 KV cache under auto."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    experts = bool(num_experts(model_config(model)))
    path, tmp = _model_path(model)
    try:
        with _quiet():
            mc = build_model_config(tp_size=layout.tp, pp_size=1, attention_dp_size=1,
                                    moe_tp_size=layout.moe_tp if experts else 1,
                                    moe_ep_size=layout.moe_ep if experts else 1, gemm_quant_mode=layout.gemm,
                                    kvcache_quant_mode=layout.kv, moe_quant_mode=layout.moe if experts else None)
            cfg = get_model(path, mc, backend).config
    finally:
        if tmp is not None:
            tmp.cleanup()
    out = {"weights": cfg.gemm_quant_mode.name, "kv_cache": cfg.kvcache_quant_mode.name}
    if experts:
        out["experts"] = cfg.moe_quant_mode.name
    return out


def memory_estimate(model: str, system: str, backend: str, version: str, layout: Layout, utilization: float,
                    max_tokens: int, max_seqs: int, nextn: int = 0) -> dict[str, Any]:
    """The package's per-GPU memory model (weights, activations, runtime, comm) and KV size."""
    require_package()
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    cfg = model_config(model)
    path, tmp = _model_path(model)
    try:
        with _quiet():
            return estimate_kv_cache(path, system, backend, version, max_num_tokens=max_tokens,
                                     max_batch_size=max_seqs, memory_fraction_kind="of_free" if backend == "trtllm" else "of_total",
                                     memory_fraction_value=utilization, nextn=nextn,
                                     **layout.kwargs(bool(num_experts(cfg))))
    except (ValueError, AssertionError, KeyError, NotImplementedError, RuntimeError) as exc:
        msg = str(exc).splitlines()[0][:200]
        if "no KV budget" in msg:
            raise SpecplanError(f"{model} does not fit on {layout.tp}x {system} at memory utilization {utilization}: "
                                f"{msg.split(': ', 1)[-1]} (try a larger --tp or --dtype fp8)") from None
        raise SpecplanError(f"{model} on {system} tp={layout.tp}: memory model failed: {msg}") from None
    finally:
        if tmp is not None:
            tmp.cleanup()


def _fold(ops: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, ms, *_rest in ops:
        key = name.split("_", 1)[1] if name.startswith(("generation_", "context_")) else name
        out[key] = out.get(key, 0.0) + float(ms)
    return out


@contextlib.contextmanager
def _quiet():
    """The package prints notes about fallback rows while loading; keep the CLI's output clean."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        prev = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(prev)

"""What vLLM's ``--kv-cache-dtype auto`` resolves to for a checkpoint, and why.

Why its own rule: aiconfigurator-core, asked for no KV mode, gives every FP8 or NVFP4
checkpoint an FP8 KV cache (``_infer_quant_modes_from_raw_config``), which doubles KV capacity
against a default vLLM launch (DeepSeek-R1 on 8x H200: 1.13 M vs 0.56 M tokens). The import
names vLLM, so ``auto`` follows vLLM's own resolution:

- ``vllm/utils/torch_utils.py`` ``resolve_kv_cache_dtype_string`` (called by
  ``vllm/engine/arg_utils.py`` ``create_engine_config`` before ``CacheConfig``): ``auto`` becomes
  the checkpoint's KV algorithm only for a ModelOpt quantization config (``quant_method``
  ``modelopt*``, which ``vllm/config/model.py`` ``_parse_quant_hf_config`` sets for a
  ``producer.name == "modelopt"`` file) whose ``kv_cache_quant_algo`` / ``kv_cache_scheme``
  (top level or under ``quantization``) says FP8 (``get_kv_cache_quant_algo_string``);
- ``vllm/model_executor/layers/attention/attention.py`` (``Attention.__init__``): a
  compressed-tensors (llm-compressor) config with a ``kv_cache_scheme`` sets ``fp8``;
- otherwise ``auto`` stays ``auto``, and ``kv_cache_dtype_str_to_dtype`` gives the model's own
  activation dtype (``model_config.dtype``, the config's ``torch_dtype``): a plain FP8 weight
  checkpoint such as DeepSeek-R1 (``quant_method: fp8``) keeps a 16-bit KV cache.

The quantization config is config.json's ``quantization_config`` or, for ModelOpt checkpoints
of 0.29 and before, ``hf_quant_config.json`` (``vllm/transformers_utils/config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SIXTEEN_BIT = ("bfloat16", "float16")


@dataclass(frozen=True)
class KvChoice:
    """The KV dtype ``auto`` resolves to (the package's mode name) and the sentence saying why."""

    mode: str
    """``bfloat16`` (any 16-bit KV cache, priced as the database's bfloat16) or ``fp8``."""
    reason: str


def model_dtype(cfg: dict[str, Any]) -> str:
    """The checkpoint's activation dtype as vLLM's ``auto`` reads it (fp32 runs as bfloat16)."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    raw = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype") or text.get("dtype")
    name = str(raw or "bfloat16").removeprefix("torch.").lower()
    return name if name in SIXTEEN_BIT else "bfloat16"


def _is_fp8(algo: Any) -> bool:
    """A ModelOpt KV algorithm vLLM maps to fp8: the string FP8, or a static 8-bit float scheme."""
    if isinstance(algo, str):
        return algo.lower() == "fp8"
    if isinstance(algo, dict):
        return algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float"
    return False


def declared_kv(quant: dict[str, Any] | None) -> str | None:
    """The KV quantization a checkpoint's quantization config makes vLLM use under ``auto``:
    a phrase naming the declaring key, or None when vLLM keeps the model dtype."""
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method") or "").lower()
    producer = quant.get("producer") if isinstance(quant.get("producer"), dict) else {}
    if method.startswith("modelopt") or producer.get("name") == "modelopt":
        inner = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else quant
        for key in ("kv_cache_scheme", "kv_cache_quant_algo"):
            algo = inner.get(key) or quant.get(key)
            if algo:
                return f"ModelOpt {key} {algo!r}" if _is_fp8(algo) else None
        return None
    if method in ("compressed-tensors", "compressed_tensors") and quant.get("kv_cache_scheme") is not None:
        return "compressed-tensors kv_cache_scheme"
    return None


def resolve_auto(cfg: dict[str, Any], quant: dict[str, Any] | None, quant_source: str) -> KvChoice:
    """vLLM's ``auto`` for this checkpoint (``cfg``: config.json; ``quant``: its quantization
    config, read from ``quant_source``)."""
    declared = declared_kv(quant)
    if declared:
        return KvChoice("fp8", f"KV cache fp8: vLLM's auto follows the checkpoint's {declared} ({quant_source})")
    dtype = model_dtype(cfg)
    why = ("the checkpoint declares no KV quantization" if quant is None else
           f"its quantization config ({quant_source}) declares no KV cache quantization vLLM applies")
    return KvChoice("bfloat16", f"KV cache {dtype}: vLLM's auto = the model dtype; {why}")

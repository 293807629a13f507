"""What a loaded model is and how it is named: LoadedModel, ModelConfig, dtypes, content hashes,
the architecture record every profile carries (no loading here)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from sim.contracts.errors import SpecplanError

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to time: eval mode, on its device, with the identity a profile records."""

    model: torch.nn.Module
    """The causal LM (transformers ``PreTrainedModel``), in eval mode, on ``device``."""
    tokenizer: Any | None
    """Its tokenizer, or None for config-only (random-weight) models."""
    identity: dict[str, Any]
    """Model identity per docs/profile-format.md (id, source, path, sha256, architecture)."""
    device: torch.device
    dtype: torch.dtype
    spec: str
    """What the user typed; used in messages and provenance."""
    notes: tuple[str, ...] = field(default=())
    """Facts about how the weights were produced (e.g. 'GGUF Q4_1 dequantised to float32')."""
    load_s: float | None = None
    """Seconds to read the tokenizer and weights and place them on the device (hashing for the
    identity excluded): the load part of a cold start (profiler/passes/cold_start.py)."""

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def random_weights(self) -> bool:
        """True for config-only models: acceptance measured on them would be meaningless."""
        return self.identity["source"] == "config-only"

    @property
    def label(self) -> str:
        """One line for provenance ``models``: id plus content hash when known."""
        sha = self.identity.get("sha256")
        return f"{self.identity['id']} sha256:{sha}" if sha else f"{self.identity['id']} (random weights)"


@dataclass(frozen=True)
class ModelConfig:
    """An architecture without weights: enough for a roofline estimate and memory arithmetic."""

    config: Any
    identity: dict[str, Any]
    spec: str


def parse_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is float32 on CPU (bf16 matmuls are slow there) and bfloat16 on CUDA."""
    key = (name or "auto").strip().lower()
    if key == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if key not in _DTYPES:
        raise SpecplanError(f"--dtype {name!r}: expected one of {', '.join(DTYPE_CHOICES)}")
    return _DTYPES[key]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``, the spelling profiles use."""
    return str(dtype).removeprefix("torch.")


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def cache_dir() -> Path:
    """Where dequantised GGUF weights are cached: ``$SPECPLAN_CACHE`` or ``~/.cache/specplan``."""
    env = os.environ.get("SPECPLAN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "specplan"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _dir_weights_sha256(folder: Path) -> str | None:
    """One hash over the weight files of a HF directory (name + content, in name order)."""
    files = sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt")
    )
    if not files:
        return None
    if len(files) == 1:
        return file_sha256(files[0])
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode())
        h.update(file_sha256(p).encode())
    return h.hexdigest()


def portable_path(path: Path, given: str) -> str:
    """A path safe to commit: relative to the working directory, else the name as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return given if not os.path.isabs(given) else path.name


def architecture(config: Any, num_parameters: int) -> dict[str, Any]:
    """The architecture block of a model identity, from a transformers config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return {
        "family": str(getattr(text, "model_type", "unknown")),
        "num_layers": int(text.num_hidden_layers),
        "hidden_size": int(text.hidden_size),
        "intermediate_size": int(getattr(text, "intermediate_size", 0) or 0),
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": int(head_dim),
        "vocab_size": int(text.vocab_size),
        "num_parameters": int(num_parameters),
    }


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return int(sum(p.numel() for p in model.parameters()))


def max_positions(config: Any) -> int | None:
    """The model's context window, when the config declares one."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if value else None


def context_length(config: Any) -> dict[str, int]:
    """The identity's ``max_model_len`` (the simulator rejects longer requests as vLLM does), or
    nothing when the config declares no context window."""
    n = max_positions(config)
    return {"max_model_len": n} if n and n >= 2 else {}

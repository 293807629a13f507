"""Published small-batch MoE runs where speculation was measured against plain decoding, each
cited, and the speed-up a profile imported for the same model, GPU, engine and layout predicts.

Why: issue 37 asks that the *sign* of a method's effect on a MoE at batch 1 come out right (the
k + 1 tokens a row verifies touch more experts than a decode, sim.contracts.expert_traffic). The
runs are typed from the issue threads that printed them (never from memory); the acceptance
length is the run's own, so the check is of the step prices alone:

    predicted = AL * (H + T(b)) / (H + V(b, k) + D(b, k) + H_draft(b, k))

from the profile's grid cells (the cells the simulator interpolates), ``H`` its per-step
overhead. ``bench/moe_speedup.py`` prints them; tests/profiler/test_published_moe_runs.py holds
the signs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SPECFORGE_339 = ("sgl-project/SpecForge issue #339 'Throughput degradation on Qwen3-30B-A3B with EAGLE3' "
                 "(Zzsf11, 2025-12-01): Qwen/Qwen3-30B-A3B on 2x H100, SGLang (SpecForge bench_eagle3.py, "
                 "--tp-size 2, --cuda-graph-max-bs 64, bf16), MT-bench 20 prompts, draft "
                 "zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead")
ANGELSLIM_163 = ("Tencent/AngelSlim issue #163 'How to repreduce the reported results of Qwen3-30B-A3B with "
                 "EAGLE3?' (Zzsf11, 2025-12-08): Qwen3-30B-A3B on 4x H100, TP 4, EP 1, SGLang (SpecForge), "
                 "temperature 0")


@dataclass(frozen=True)
class MoeRun:
    """One published measurement: plain decoding against speculation at a fixed batch."""

    key: str
    model: str
    system: str
    backend: str
    tp: int
    method: str
    batch: int
    k: int
    """Draft tokens verified per row and step (SGLang: num_draft_tokens - 1)."""
    acceptance_length: float
    """Mean tokens committed per row and step, as the run printed it."""
    base_tok_s: float
    spec_tok_s: float
    source: str
    row: str
    """The table row read, as printed."""
    wide_base_tok_s: float | None = None
    """The same table's plain-decoding throughput at ``batch * (k + 1)`` rows: a pass over as many
    tokens as the verify, measured in the same run (None: not in the table)."""
    stand_in: str = ""
    """What the prediction prices differently from the run (said beside the number)."""
    topk: int = 1
    """SGLang's ``speculative_eagle_topk``: branches a draft step expands per row (1: a chain)."""

    @property
    def measured(self) -> float:
        return self.spec_tok_s / self.base_tok_s

    @property
    def spec_step_s(self) -> float:
        """Seconds per speculative step the run implies: ``batch * AL`` tokens per step."""
        return self.batch * self.acceptance_length / self.spec_tok_s

    @property
    def wide_step_s(self) -> float | None:
        """Seconds per plain step of ``batch * (k + 1)`` rows in the same run (an upper estimate of
        the verify pass with its step overhead: one row's k + 1 queries read one context, not k + 1)."""
        rows = self.batch * (self.k + 1)
        return None if self.wide_base_tok_s is None else rows / self.wide_base_tok_s

    @property
    def implied_drafting_s(self) -> float | None:
        """The drafting side a step of the run spent at least (draft passes and host work): its
        speculative step less a plain step over as many tokens as the verify."""
        wide = self.wide_step_s
        return None if wide is None else self.spec_step_s - wide


RUNS: tuple[MoeRun, ...] = (
    MoeRun("specforge339-b1", "Qwen/Qwen3-30B-A3B", "h100_sxm", "sglang", 2, "eagle3", 1, 3, 1.86, 222.47, 159.78,
           SPECFORGE_339, "bs 1: base 222.47 tok/s; steps 3, topk 1, num_draft 4: 159.78 tok/s, acc len 1.86",
           wide_base_tok_s=566.21),
    MoeRun("specforge339-b4", "Qwen/Qwen3-30B-A3B", "h100_sxm", "sglang", 2, "eagle3", 4, 3, 1.86, 566.21, 447.90,
           SPECFORGE_339, "bs 4: base 566.21 tok/s; steps 3, topk 1, num_draft 4: 447.90 tok/s, acc len 1.86",
           wide_base_tok_s=1012.96),
    MoeRun("angelslim163-b1", "Qwen/Qwen3-30B-A3B", "h100_sxm", "sglang", 4, "eagle3", 1, 3, 2.017, 218.89, 170.35,
           ANGELSLIM_163, "tp 4, bs 1: base 218.89 tok/s; steps 3, topk 3, num_draft_tokens 4: 170.35 tok/s, "
           "accept_length 2.017", wide_base_tok_s=507.49, topk=3,
           stand_in="a tree of 3 steps x top-3 verifying 4 tokens per row, priced as a chain of 3: the same verify "
           "and draft-pass count; the tree's wider draft passes are priced beside it (tree_drafting)"),
)
"""Runs with no GPU named or another engine (AngelSlim #9, llama.cpp #18039) and aggregates without
per-model numbers (Cascade, arXiv 2506.20675: 'up to 1.5x' slowdown over five MoEs in vLLM) are
left out: nothing to import them against."""


def cell(grid: Any, **at: float) -> float:
    """The grid's median at an exact grid point (no interpolation)."""
    idx = tuple(grid.axes[i].index(at[n]) for i, n in enumerate(grid.axis_names))
    return float(grid.median[idx])


def predicted(profile: Any, run: MoeRun, context: float, overheads: bool = True) -> float:
    """Steady-state speed-up of ``run`` on ``profile`` at ``context``, at the run's own acceptance
    length; ``overheads=False`` leaves out the profile's per-step and draft host overheads (both
    *assumed* in an import) to show whether the sign rests on them."""
    tf, prop = profile.timing.target_forward, profile.timing.proposers[run.method]
    h = profile.timing.step_overhead.seconds if overheads and profile.timing.step_overhead is not None else 0.0
    b, k = run.batch, run.k
    base = h + cell(tf, batch=b, tokens_per_seq=1, context=context)
    spec = (h + cell(tf, batch=b, tokens_per_seq=k + 1, context=context) + cell(prop.draft, batch=b, k=k, context=context)
            + (cell(prop.overhead, batch=b, k=k) if overheads else 0.0))
    return run.acceptance_length * base / spec


def priced_drafting(profile: Any, run: MoeRun, context: float) -> float:
    """The drafting side the profile prices for ``run``: draft passes D plus their host work."""
    prop = profile.timing.proposers[run.method]
    return cell(prop.draft, batch=run.batch, k=run.k, context=context) + cell(prop.overhead, batch=run.batch, k=run.k)


def break_even_drafting(profile: Any, run: MoeRun, context: float) -> float:
    """The most the drafting side may cost a step for speculation to pay on the profile's target
    passes at the run's acceptance length: ``AL * (H + T) - (H + V)`` (negative: never pays)."""
    tf = profile.timing.target_forward
    h = profile.timing.step_overhead.seconds if profile.timing.step_overhead is not None else 0.0
    t = cell(tf, batch=run.batch, tokens_per_seq=1, context=context)
    v = cell(tf, batch=run.batch, tokens_per_seq=run.k + 1, context=context)
    return run.acceptance_length * (h + t) - (h + v)


def sglang_tree_draft(head: Any, batch: int, steps: int, topk: int, context: int) -> float:
    """Draft-pass ms of SGLang's EAGLE tree on a head's ``GridBuilder``: one draft-extend pass over
    each row's ``steps + 1`` tokens with its LM head on the row's last position
    (``eagle_draft_extend_cuda_graph_runner.py``: ``num_tokens_per_bs = speculative_num_steps + 1``,
    one logits row per request), then ``steps - 1`` passes over ``batch * topk`` tokens, each
    scoring all of them (``eagle_worker.py`` ``draft_forward``: "we get 1 token from draft prefill
    and (#spec steps - 1) tokens here"; softmax and top-k over every branch's logits). With
    ``topk = 1`` it is the chain ``GridBuilder.draft`` prices."""
    w = batch * topk
    extend = head.dense(batch * (steps + 1)) + head.logits(batch) + head.decode_attention(batch, steps + 1, context)
    return extend + (steps - 1) * (head.dense(w) + head.logits(w) + head.decode_attention(w, 1, context))


def tree_drafting(run: MoeRun, context: int) -> tuple[float, float]:
    """(tree, chain) draft-pass seconds of ``run``'s EAGLE-3 head on the same database, host
    overheads left out: the tree as SGLang runs it (:func:`sglang_tree_draft`, ``k`` steps of
    ``run.topk``) and the chain the import prices. Why: to show what the chain stand-in leaves out,
    on the database's own numbers (the head compiled at the run's TP, its all-reduces included)."""
    import json
    import tempfile
    from pathlib import Path

    from profiler.imported import aic_database as db
    from profiler.imported import aic_heads
    from profiler.imported.aic_grids import GridBuilder
    from profiler.imported.aiconfigurator_import import ImportRequest, _layout

    layout = _layout(ImportRequest(run.system, run.backend, run.model, tp=run.tp))
    shape = aic_heads.head_shape(run.method, db.model_config(run.model), layout)
    version = db.resolve_version(run.system, run.backend, None)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(shape.config))
        head = GridBuilder(db.compile_engine(tmp, run.system, run.backend, version, shape.layout, label="head"))
    tree = sglang_tree_draft(head, run.batch, run.k, run.topk, context)
    return tree * 1e-3, head.draft(run.batch, run.k, context) * 1e-3


def implied_speculative_host(profile: Any, run: MoeRun, context: float) -> float:
    """Seconds a speculative step of ``run`` spent beyond its own plain step and the kernels the
    profile prices for the difference (verify over decode, draft passes): ``spec step - base step
    - (V - T + D)``. Why: the run's plain step carries the engine's per-step host time, so what is
    left is time only a speculative step pays that no kernel here accounts for (drafting's host
    work, the tree's bookkeeping, synchronisations); an implied figure, not a measurement of it."""
    tf, prop = profile.timing.target_forward, profile.timing.proposers[run.method]
    b, k = run.batch, run.k
    kernels = (cell(tf, batch=b, tokens_per_seq=k + 1, context=context) - cell(tf, batch=b, tokens_per_seq=1, context=context)
               + cell(prop.draft, batch=b, k=k, context=context))
    return run.spec_step_s - run.batch / run.base_tok_s - kernels


def import_for(run: MoeRun, command: str) -> Any:
    """The profile aiconfigurator-core's database gives for ``run``'s model, GPU, engine and TP."""
    import json

    from profiler.imported.aiconfigurator_import import ImportRequest, build_profile
    from sim.contracts.profile import Profile

    d = build_profile(ImportRequest(run.system, run.backend, run.model, (run.method,), tp=run.tp, command=command))
    return Profile.from_dict(json.loads(json.dumps(d)), command)

"""Tensor-parallel all-reduces in the kernel database's passes (profiler/imported/aic_allreduce.py):
a TP forward all-reduces after attention and after the MLP or MoE in every layer, so a pass at
TP > 1 must price two calls a layer, counted against the database's own all-reduce table
(issue 37: the TP 4 MoE case was thought to lack the one after attention)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.imported import aic_allreduce

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

SYSTEM = "h100_sxm"
CASES = [(model, backend, tp) for model in ("Qwen/Qwen3-30B-A3B", "meta-llama/Llama-3.1-8B")
         for backend in ("sglang", "vllm", "trtllm") for tp in (2, 4)]
"""A Qwen3 MoE (the published TP 4 run's model) and a dense Llama, every engine, TP 2 and 4."""


def _pass(model: str, backend: str, tp: int, rows: int) -> tuple[dict[str, float], aic_allreduce.AllReduceAudit | None]:
    from profiler.imported import aic_database as db
    from profiler.imported.aiconfigurator_import import ImportRequest, _layout

    version = db.resolve_version(SYSTEM, backend, None)
    eng = db.compile_engine(model, SYSTEM, backend, version, _layout(ImportRequest(SYSTEM, backend, model, tp=tp)))
    text = db.model_config(model)
    ops = eng.decode_ops(rows, 1024)
    return ops, aic_allreduce.audit(ops, rows, int(text["hidden_size"]), int(text["num_hidden_layers"]), SYSTEM,
                                    backend, version, tp)


@pytest.mark.parametrize(("model", "backend", "tp"), CASES)
def test_a_tensor_parallel_pass_prices_two_allreduces_per_layer(model: str, backend: str, tp: int) -> None:
    for rows in (1, 4, 16):
        _ops, a = _pass(model, backend, tp, rows)
        assert a is not None, f"{model} {backend} tp {tp}: no all-reduce table to count against"
        assert a.per_layer == pytest.approx(2.0, abs=0.005), (
            f"{model} {backend} tp {tp}, {rows} rows: {a.per_layer:.2f} all-reduces per layer priced, a TP layer needs 2")
        assert a.missing_ms() == pytest.approx(0.0, abs=0.005 * a.layers * a.one_call_ms)


def test_the_count_finds_a_pass_without_the_allreduce_after_attention() -> None:
    """The check that would have caught the omission: drop the MoE block's attention-side
    all-reduce (``moe_pre_dispatch``) and the pass reads one call a layer, short by ``layers`` calls."""
    ops, a = _pass("Qwen/Qwen3-30B-A3B", "sglang", 4, 4)
    assert a is not None and ops["moe_pre_dispatch"] > 0
    short = aic_allreduce.audit({k: v for k, v in ops.items() if k != "moe_pre_dispatch"}, a.tokens, a.hidden,
                                a.layers, SYSTEM, "sglang", "0.5.14", 4)
    assert short is not None and short.per_layer == pytest.approx(1.0, abs=0.05)
    assert short.missing_ms() == pytest.approx(a.layers * a.one_call_ms, rel=0.05)


def test_collectives_hidden_in_an_overlapped_op_are_not_counted_as_missing() -> None:
    ops = {"mla_block": 4.5, "moe_overlap": 5.8, "logits_gemm": 0.06}
    assert aic_allreduce.audit(ops, 4, 7168, 61, SYSTEM, "sglang", "0.5.14", 8) is None


def test_no_allreduce_is_counted_at_tp_1() -> None:
    assert aic_allreduce.audit({"ar_1": 0.0, "ar_2": 0.0}, 4, 4096, 32, SYSTEM, "vllm", "0.24.0", 1) is None


@pytest.mark.parametrize("name", ["ar_1", "ar_2", "embedding_ar", "tp_allreduce", "moe_pre_dispatch",
                                  "swa_moe_post_dispatch"])
def test_every_collective_op_name_of_the_database_counts(name: str) -> None:
    assert aic_allreduce.collective_ms({name: 1.0, "qkv_gemm": 5.0}) == 1.0


@pytest.mark.parametrize("name", ["qkv_gemm", "act_gate", "add_norm_2", "router_gemm", "moe", "attention", "logits_gemm"])
def test_no_compute_op_counts_as_a_collective(name: str) -> None:
    assert aic_allreduce.collective_ms({name: 1.0}) == 0.0


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([2, 4, 8]), a=st.integers(1, 1 << 22), b=st.integers(1, 1 << 22),
       backend=st.sampled_from(["sglang", "vllm"]))
def test_an_allreduce_read_between_table_rows_lies_between_them(tp: int, a: int, b: int, backend: str) -> None:
    """Linear between the table's rows: a message between two sizes costs between their rows."""
    version = {"sglang": "0.5.14", "vllm": "0.24.0"}[backend]
    rows = aic_allreduce._table(SYSTEM, backend, version, tp)
    lo, hi = min(a, b), max(a, b)
    x = (lo + hi) // 2
    below = max((r for r in rows if r[0] <= x), default=rows[0])
    above = min((r for r in rows if r[0] >= x), default=rows[-1])
    got = aic_allreduce.allreduce_ms(SYSTEM, backend, version, tp, x)
    assert got is not None
    assert min(below[1], above[1]) - 1e-12 <= got <= max(below[1], above[1]) + 1e-12

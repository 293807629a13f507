"""Published small-batch MoE runs where speculation hurt: the sign of the predicted speed-up on a
profile imported for the same model, GPU, engine and TP (issue 37's MoE bar), and the routed
experts timed under the uniform routing sim/contracts/expert_traffic.py assumes."""

from __future__ import annotations

import pytest

from profiler.imported.published_moe_runs import RUNS, MoeRun, import_for, predicted

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed")

CONTEXTS = (512, 1024)
"""MT-bench decode contexts (prompts of tens to a few hundred tokens, answers of hundreds)."""
SIGN_HELD = ("specforge339-b1", "specforge339-b4")
WRONG = {"angelslim163-b1": ("TP 4: the database's pass over 4 tokens is 36 % below the same run's 4-row plain "
                             "step (no per-layer all-reduce in its SGLang ops) and the run's drafting side is at "
                             "least 2.3x the one priced; either alone flips the sign (docs/fidelity-gpu.md)")}
_CACHE: dict[tuple[str, str, str, int], object] = {}


def _profile(run: MoeRun):
    key = (run.model, run.system, run.backend, run.tp)
    if key not in _CACHE:
        _CACHE[key] = import_for(run, "tests/profiler/test_published_moe_runs.py")
    return _CACHE[key]


def _run(key: str) -> MoeRun:
    return next(r for r in RUNS if r.key == key)


def test_every_case_is_a_published_slowdown_cited_with_its_row() -> None:
    assert {r.key for r in RUNS} == set(SIGN_HELD) | set(WRONG)
    for r in RUNS:
        assert r.measured < 1.0 and r.spec_step_s > 0
        assert str(r.base_tok_s) in r.row and str(r.spec_tok_s).rstrip("0") in r.row and "issue #" in r.source


@pytest.mark.parametrize("key", SIGN_HELD)
def test_the_predicted_sign_of_speculation_on_a_moe_at_small_batch_is_the_published_one(key) -> None:
    run = _run(key)
    for ctx in CONTEXTS:
        assert predicted(_profile(run), run, ctx) < 1.0, f"{key} at context {ctx}: predicted a gain, measured {run.measured:.2f}x"


@pytest.mark.parametrize("key", list(WRONG))
def test_a_known_sign_error_stays_documented_until_fixed(key) -> None:
    """Strict: when the prediction turns right, this fails, so the docs' account is updated."""
    run = _run(key)
    got = predicted(_profile(run), run, 1024)
    if got < 1.0:
        pytest.fail(f"{key} now predicts {got:.2f}x (right sign): drop it from WRONG and update docs/fidelity-gpu.md")
    assert got > run.measured, WRONG[key]


def test_a_qwen3_moe_import_times_its_experts_under_uniform_routing_never_below_the_skewed_default() -> None:
    """Qwen3 MoE (aic_routing.ROUTED_FAMILIES): uniform routing touches at least as many distinct
    experts as a power law, so the expert op priced for 4-16 tokens lies at or above the default rows."""
    import aiconfigurator_core.sdk.engine as pkg

    from profiler.imported import aic_database as db
    from profiler.imported import aic_routing
    from profiler.imported.aiconfigurator_import import ImportRequest, _layout

    run = _run("specforge339-b4")
    layout = _layout(ImportRequest(run.system, run.backend, run.model, tp=run.tp))
    version = db.resolve_version(run.system, run.backend, None)
    uniform = db.compile_engine(run.model, run.system, run.backend, version, layout)
    assert uniform.routing is not None and f"'{aic_routing.ROUTING}'" in uniform.routing
    path, tmp = db._model_path(run.model)
    try:
        default = pkg.EngineHandle.compile(path, run.system, run.backend, backend_version=version, **layout.kwargs(True))
    finally:
        if tmp is not None:
            tmp.cleanup()
    for rows in (4, 8, 16):
        ours, theirs = uniform.decode_ops(rows, 1024)["moe"], db._fold(default.decode_step_per_op(rows, 1024, 2))["moe"]
        assert ours >= theirs * 0.98, f"{rows} tokens: {ours:.3f} ms < the power-law rows' {theirs:.3f} ms"
    assert uniform.decode_ops(16, 1024)["moe"] > 1.3 * db._fold(default.decode_step_per_op(16, 1024, 2))["moe"]


def test_a_moe_family_without_measured_evidence_keeps_the_packages_default_routing_and_says_so() -> None:
    from profiler.imported import aic_database as db
    from profiler.imported import aic_routing
    from profiler.imported.aiconfigurator_import import ImportRequest, _layout

    assert "gpt_oss" not in aic_routing.ROUTED_FAMILIES  # its silicon rows fit the default (docs §6)
    layout = _layout(ImportRequest("h200_sxm", "vllm", "openai/gpt-oss-120b"))
    eng = db.compile_engine("openai/gpt-oss-120b", "h200_sxm", "vllm", db.resolve_version("h200_sxm", "vllm", "0.24.0"), layout)
    assert eng.routing is not None and "default" in eng.routing and aic_routing.ROUTING not in eng.routing

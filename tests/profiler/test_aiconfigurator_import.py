"""The import from aiconfigurator-core through the real package's API (skipped without the extra).

`make test` installs the `gpu-data` extra (requirements-gpu-data.txt), so CI runs these.
"""

from __future__ import annotations

import json
import sys

import pytest

from cli.main import main
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile
from sim.model.step_time import ProfileStepTimer, StepShape

aic = pytest.importorskip(
    "aiconfigurator_core", reason="aiconfigurator-core (the gpu-data extra) is not installed: pip install 'specplan[gpu-data]'"
)


@pytest.fixture(scope="module")
def tiny_profile() -> dict:
    """Llama-3.2-1B on h200_sxm / vLLM with an EAGLE-3-style head: the smallest real case."""
    from profiler.imported.aiconfigurator_import import ImportRequest, build_profile

    return build_profile(ImportRequest("h200_sxm", "vllm", "meta-llama/Llama-3.2-1B", ("eagle3",), command="test"))


def test_import_builds_a_profile_the_simulator_loads_and_names_its_source(tiny_profile) -> None:
    p = Profile.from_dict(json.loads(json.dumps(tiny_profile)), "tiny")
    assert p.timing.step_composition == "fused" and p.timing.fused is not None
    assert p.timing.provenance.method == "imported" and p.memory.provenance.method == "imported"
    assert p.timing.step_overhead is not None and p.timing.step_overhead.provenance.method == "estimated"
    assert p.timing.proposers["eagle3"].overhead_provenance.method == "assumed"
    assert p.timing.proposers["eagle3"].prefill is not None
    line = p.sources()[0]
    assert "aiconfigurator-core" in line and "h200_sxm/vllm 0.24.0" in line and "eagle3: modelled" in line
    meta = tiny_profile["x-aiconfigurator"]["collection_meta"]
    assert meta["gemm"]["runtime"]["framework"] == "vllm"


def test_grids_are_the_packages_own_numbers(tiny_profile) -> None:
    """T(b=1) is the package's decode_step_latency; P(n) its context phase; a fused mixed step
    lies within a few percent of the package's mixed_step_latency (ours prices logits per row)."""
    from profiler.imported import aic_database as db

    eng = db.compile_engine("meta-llama/Llama-3.2-1B", "h200_sxm", "vllm", "0.24.0", db.Layout())
    tf = tiny_profile["timing"]["target_forward"]
    c = tf["axes"]["context"].index(1024)
    assert tf["median"][0][0][c] * 1e3 == pytest.approx(eng.handle.decode_step_latency(1, 1024, 2), rel=1e-6)
    tp = tiny_profile["timing"]["target_prefill"]
    n, c0 = tp["axes"]["tokens"].index(1024), tp["axes"]["context"].index(0)
    assert tp["median"][n][c0] * 1e3 == pytest.approx(eng.handle.predict_prefill_latency(1, 1024, 0), rel=1e-6)
    timer = ProfileStepTimer(Profile.from_dict(tiny_profile, "tiny"))
    ours = (timer(StepShape(32, 1024.0, 0, None, 1024, 0.0)) - timer.step_overhead_s) * 1e3
    theirs = eng.mixed_ms(1024, 32, 1024)
    assert ours == pytest.approx(theirs, rel=0.05)
    apart = sum(timer(s) - timer.step_overhead_s for s in (StepShape(32, 1024.0, 0, None),
                                                            StepShape(0, 0.0, 0, None, 1024, 0.0))) * 1e3
    assert ours < apart  # fusing reads the weights once


def test_list_prints_what_the_database_covers(capsys) -> None:
    assert main(["profile", "import-aiconfigurator", "--system", "list"]) == 0
    out = capsys.readouterr().out
    assert "h200_sxm:" in out and "vllm 0.24.0" in out
    assert main(["profile", "import-aiconfigurator", "--target", "list"]) == 0
    out = capsys.readouterr().out
    assert "meta-llama/Meta-Llama-3.1-8B" in out and "meta-llama/Llama-3.2-1B" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--system", "h300_sxm"], "--system 'h300_sxm': not in the installed database (valid: "),
        (["--backend-version", "0.1.0"], "--backend-version '0.1.0': not a queryable vllm version on h200_sxm (valid: 0.24.0"),
        (["--backend", "tgi"], "--backend 'tgi': no tgi data for h200_sxm (valid: sglang, trtllm, vllm)"),
        (["--target", "meta-llama/Llama-9-1B"], "model 'meta-llama/Llama-9-1B': the installed database has no config for it"),
        (["--tp", "3"], "--tp 3: meta-llama/Llama-3.2-1B has 32 attention heads; TP must divide them (valid: 1, 2, 4, 8)"),
        (["--draft", "mtp"], "--draft mtp: meta-llama/Llama-3.2-1B has no MTP (next-n) modules (num_nextn_predict_layers "
                             "is 0 in its config.json; valid for it: eagle, eagle3, ngram, suffix"),
        (["--draft", "eagle4"], "--draft eagle4: not a keyword (eagle, eagle3, mtp, ngram, suffix, none) nor a model"),
        (["--dtype", "fp4"], "--dtype fp4: h200_sxm has no FP4 tensor cores (valid on h200_sxm: auto, bf16, fp8;"),
        (["--dtype", "int3"], "--dtype 'int3': valid for the import: auto, bf16, bfloat16, fp8, fp4, nvfp4"),
        (["--kv-cache-dtype", "fp4"], "--kv-cache-dtype 'fp4': valid for the import: auto, bf16, bfloat16, fp8"),
        (["--ep", "2"], "--ep 2: meta-llama/Llama-3.2-1B is a dense model with no experts (valid: --ep 1)"),
        (["--target", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "--tp", "8", "--ep", "3"],
         "--ep 3: meta-llama/Llama-4-Scout-17B-16E-Instruct has 16 experts on --tp 8 GPUs; expert parallelism must "
         "divide both (the experts' TP x EP = 8; valid: --ep 1, 2, 4, 8)"),
        (["--target", "deepseek-ai/DeepSeek-V4-Flash", "--tp", "8", "--ep", "8"],
         "deepseek-ai/DeepSeek-V4-Flash on h200_sxm/vllm 0.24.0 tp=8: the database has no timings for its module "
         "kernels at quant bfloat16 (valid: another --dtype or --kv-cache-dtype, --system or --backend-version"),
        (["--target", "deepseek-ai/DeepSeek-V4-Flash", "--tp", "8", "--ep", "8", "--kv-cache-dtype", "fp8"],
         "deepseek-ai/DeepSeek-V4-Flash on h200_sxm/vllm 0.24.0 tp=8: the database has no timings for its MoE kernels "
         "at quant w4a8_mxfp4_mxfp8 (valid: another --dtype or --kv-cache-dtype, --system or --backend-version"),
        (["--dtype", "fp8", "--system", "a100_sxm"], "--dtype fp8: a100_sxm has no FP8 tensor cores (valid on a100_sxm"),
        (["--assume-proposal-rate", "ngram=0.5"], "--assume-proposal-rate ngram: needs --assume-acceptance ngram"),
        (["--target", "meta-llama/Llama-3.1-70B", "--system", "l40s"], "does not fit on 1x l40s"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message) -> None:
    base = {"--system": "h200_sxm", "--target": "meta-llama/Llama-3.2-1B"}
    argv = ["profile", "import-aiconfigurator", "-o", str(tmp_path / "o.json")]
    for flag, value in base.items():
        if flag not in args:
            argv += [flag, value]
    assert main(argv + args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert len(err) < 400  # never the database's list of every model id


def test_missing_extra_is_one_line_with_the_install_command(monkeypatch) -> None:
    from profiler.imported import aic_database as db

    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    with pytest.raises(SpecplanError) as exc:
        db.require_package()
    assert str(exc.value) == "aiconfigurator-core is not installed: pip install 'specplan[gpu-data]'"

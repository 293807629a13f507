"""``profile estimate`` for the models teams plan for: MoE (Mixtral, DeepSeek-V3 with MLA), every
vLLM proposer method, weight and KV-cache precision, and the one-line refusals on the way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiler.estimates.estimate_inputs import efficiency, estimate_from_specs
from profiler.hf_config import read_config
from profiler.model_shape import active_body_params, body_bytes_read, body_params, expert_coverage
from sim.contracts.errors import SpecplanError
from sim.contracts.profile import Profile

REPO = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).resolve().parent / "configs"
MIXTRAL = str(CONFIGS / "mixtral-8x7b.json")
DEEPSEEK = str(CONFIGS / "deepseek-v3.json")


def est(target: str, gpu: str = "H200", tp: int = 1, dtype: str = "bf16", kv: str = "auto",
        proposers: tuple[str, ...] = (), drafts: tuple[str, ...] = ()) -> dict:
    eff = efficiency(calibrate_from=None, compute=None, bandwidth=None, step_overhead_ms=None, draft_pass_overhead_ms=None)
    return estimate_from_specs(gpu=gpu, target=target, proposer_models=drafts, proposers=proposers, dtype=dtype,
                               k_max=4, eff=eff, tensor_parallel_size=tp, command="test", name=None,
                               kv_cache_dtype=kv)


@pytest.mark.parametrize(("config", "published", "tp"), [(MIXTRAL, 46.7e9, 2), (DEEPSEEK, 671e9, 16)])
def test_moe_weight_memory_is_all_experts_within_5_percent_of_params_times_bytes(config, published, tp) -> None:
    """Mixtral was estimated as a 7B dense model (13.5 GiB); memory now holds every expert."""
    prof = est(config, tp=tp)
    assert prof["memory"]["target_weight_bytes"] == pytest.approx(published * 2, rel=0.05)
    arch = prof["target"]["architecture"]
    assert arch["moe"]["num_experts"] in (8, 256) and arch["num_parameters"] == pytest.approx(published, rel=0.01)
    Profile.from_dict(json.loads(json.dumps(prof)), "moe")  # the simulator reads the moe/mla blocks


def test_moe_decode_reads_the_experts_the_batch_touches() -> None:
    """Batch 1 reads 2 of Mixtral's 8 experts per layer; a large batch reads them all."""
    prof = est(MIXTRAL, tp=2)
    arch = prof["target"]["architecture"]
    tf = prof["timing"]["target_forward"]
    b = tf["axes"]["batch"]
    t1, t256 = tf["median"][0][0][0], tf["median"][b.index(256)][0][0]
    all_experts = body_params(arch) * 2 / 2  # bytes per GPU at TP 2
    active = active_body_params(arch) * 2 / 2
    bw = 4.8e12 * 0.8
    assert active / bw < t1 < 1.3 * active / bw + 1e-3  # ~2 experts' worth, not 8
    assert t256 > all_experts / bw  # every expert read once the batch covers them
    assert "uniform routing" in prof["timing"]["provenance"]["notes"]


@given(tokens=st.integers(0, 100_000), more=st.integers(0, 100_000), e=st.integers(2, 512), k=st.integers(1, 16))
def test_expert_coverage_and_bytes_read_are_bounded_and_grow(tokens, more, e, k) -> None:
    k = min(k, e)
    cov = expert_coverage(e, k, tokens)
    assert 0 <= cov <= min(e, k * tokens) + 1e-6
    assert expert_coverage(e, k, tokens + more) >= cov - 1e-9
    arch = read_config(MIXTRAL).identity["architecture"]
    arch = {**arch, "moe": {**arch["moe"], "num_experts": e, "experts_per_token": k}}
    lo, hi = body_bytes_read(arch, tokens, 2), body_bytes_read(arch, tokens + more, 2)
    assert hi >= lo - 1e-3
    assert hi <= body_params(arch) * 2 + 1e-3


def test_deepseek_mla_kv_is_the_latent_and_mtp_is_priced_as_one_layer() -> None:
    prof = est(DEEPSEEK, tp=8, dtype="fp8", proposers=("mtp",))
    mem = prof["memory"]
    assert mem["target_kv_bytes_per_token"] == 8 * 61 * (512 + 64) * 2  # latent + rope key, on every GPU
    assert prof["proposers"]["mtp"]["kind"] == "mtp"
    mtp = mem["proposers"]["mtp"]
    assert mtp["kv_bytes_per_token"] == 8 * (512 + 64) * 2
    assert 0.9e10 < mtp["weight_bytes"] < 1.6e10  # the MTP module: one MoE layer (~11.5B) + projection, fp8
    with pytest.raises(SpecplanError, match="--proposer mtp: mixtral-8x7b-shaped has no MTP modules"):
        est(MIXTRAL, tp=2, proposers=("mtp",))


def test_every_vllm_method_is_a_proposer_with_its_own_kind() -> None:
    prof = est("config:llama-3.1-8b", gpu="H100", proposers=("ngram", "suffix", "eagle", "eagle3", "selfdraft:4"),
               drafts=("config:llama-3.2-1b",))
    kinds = {n: p["kind"] for n, p in prof["proposers"].items()}
    assert kinds == {"ngram": "ngram", "suffix": "suffix", "eagle": "eagle", "eagle3": "eagle3",
                     "selfdraft-l4": "self_draft", "llama-3.2-1b-shaped": "draft_model"}
    p = Profile.from_dict(prof, "all")
    ngram = p.timing.proposers["ngram"]
    assert float(ngram.draft.median.max()) == 0.0  # no GPU pass
    assert ngram.overhead_provenance.method == "assumed" and "host" in ngram.overhead_provenance.notes
    assert prof["memory"]["proposers"]["ngram"]["weight_bytes"] == 0
    # EAGLE-1 shares the target's LM head, EAGLE-3 carries a 32k-token one: smaller, faster passes
    d = prof["timing"]["proposers"]
    assert d["eagle3"]["draft"]["median"][0][0][0] < d["eagle"]["draft"]["median"][0][0][0]
    with pytest.raises(SpecplanError, match="valid for the estimate: ngram, suffix, eagle, eagle3, mtp"):
        est("config:llama-3.1-8b", proposers=("medusa",))


def test_fp8_kv_cache_holds_twice_the_tokens_of_bf16_at_equal_memory() -> None:
    bf16, fp8 = est("config:llama-3.1-70b", tp=2), est("config:llama-3.1-70b", tp=2, kv="fp8")
    assert fp8["memory"]["target_kv_bytes_per_token"] * 2 == bf16["memory"]["target_kv_bytes_per_token"]
    assert fp8["memory"]["target_weight_bytes"] == bf16["memory"]["target_weight_bytes"]
    for a, b in zip(bf16["memory"]["kv_capacity"], fp8["memory"]["kv_capacity"], strict=True):
        assert abs(b["kv_tokens"] - 2 * a["kv_tokens"]) <= 2


def test_fp8_weights_halve_the_layer_bytes_and_speed_decode() -> None:
    bf16, fp8 = est("config:llama-3.1-70b", tp=2), est("config:llama-3.1-70b", tp=2, dtype="fp8", kv="fp8")
    arch = bf16["target"]["architecture"]
    assert fp8["memory"]["target_weight_bytes"] == pytest.approx(bf16["memory"]["target_weight_bytes"] / 2, rel=0.03)
    assert fp8["memory"]["target_weight_bytes"] > body_params(arch)  # embeddings and LM head stay 16-bit
    t16, t8 = bf16["timing"]["target_forward"]["median"][0][0][0], fp8["timing"]["target_forward"]["median"][0][0][0]
    assert 0.45 < t8 / t16 < 0.6
    assert "fp8" in fp8["name"] and "fp8 KV cache" in fp8["description"]


@pytest.mark.parametrize(("args", "message"), [
    (("--gpu", "A100", "--target", "config:llama-3.1-8b", "--dtype", "fp8"),
     "--dtype fp8: A100-80GB has no fp8 tensor cores (valid on A100-80GB: bf16, fp16)"),
    (("--gpu", "H100", "--target", "config:llama-3.1-8b", "--dtype", "fp4"),
     "--dtype fp4: H100-SXM has no fp4 tensor cores (valid on H100-SXM: bf16, fp16, fp8)"),
    (("--gpu", "A100", "--target", "config:llama-3.1-8b", "--kv-cache-dtype", "fp8"),
     "--kv-cache-dtype fp8: A100-80GB has no FP8 support (valid on A100-80GB: bf16, fp16)"),
    (("--gpu", "H100", "--target", "config:llama-3.1-8b", "--proposer-model", str(CONFIGS / "qwen2.5-0.5b.json")),
     "--proposer-model qwen2.5-0.5b-shaped: vocabulary 151936 (qwen2) differs from the target's 128256 (llama)"),
    (("--gpu", "H100", "--target", "config:llama-3.1-8b", "--proposer-model", "/no/such/config.json"),
     "--proposer-model /no/such/config.json: no file /no/such/config.json"),
    (("--gpu", "H100", "--target", "config:llama-3.1-8b", "--proposer", "mtp"),
     "--proposer mtp: llama-3.1-8b-shaped has no MTP modules"),
])
def test_bad_precision_and_drafts_are_one_line_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    r = subprocess.run([sys.executable, "-m", "cli", "profile", "estimate", *args, "-o", str(tmp_path / "x.json")],
                       capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_moe_config_without_its_routing_is_refused_never_dense(tmp_path: Path) -> None:
    cfg = json.loads(Path(MIXTRAL).read_text())
    del cfg["num_experts_per_tok"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecplanError, match="num_experts_per_tok: expected an integer >= 1, got None "
                                            r"\(a mixture-of-experts config needs it\)"):
        read_config(str(path))


def test_qwen25_draft_with_a_padded_vocabulary_and_an_absolute_path_is_accepted() -> None:
    """Qwen2.5-0.5B (151,936) drafting for -32B (152,064): one tokenizer, padded embedding tables;
    both given as absolute paths, which the profile must not record as machine paths."""
    prof = est(str(CONFIGS / "qwen2.5-32b.json"), gpu="H200", tp=2, drafts=(str(CONFIGS / "qwen2.5-0.5b.json"),))
    ident = prof["proposers"]["qwen2.5-0.5b-shaped"]
    assert "embedding-table padding" in ident["note"]
    assert prof["target"]["path"] is None and ident["model"]["path"] is None
    Profile.from_dict(prof, "qwen")


def test_host_lookup_cost_given_on_the_command_line_replaces_the_assumed_one() -> None:
    eff = efficiency(calibrate_from=None, compute=None, bandwidth=None, step_overhead_ms=None, draft_pass_overhead_ms=None)
    prof = estimate_from_specs(gpu="H100", target="config:llama-3.1-8b", proposer_models=(), proposers=("ngram",),
                               dtype="bf16", k_max=3, eff=eff, tensor_parallel_size=1, command="t", name=None,
                               host_lookup_us=20)
    t = prof["timing"]["proposers"]["ngram"]
    b = t["overhead"]["axes"]["batch"]
    assert t["overhead"]["median"][b.index(64)] == pytest.approx([64 * 20e-6] * 3)
    assert t["overhead_provenance"]["notes"].startswith("given on the command line (--host-lookup-us 20)")
    with pytest.raises(SpecplanError, match="--host-lookup-us -1: must be >= 0"):
        estimate_from_specs(gpu="H100", target="config:llama-3.1-8b", proposer_models=(), proposers=("ngram",),
                            dtype="bf16", k_max=3, eff=eff, tensor_parallel_size=1, command="t", name=None,
                            host_lookup_us=-1)

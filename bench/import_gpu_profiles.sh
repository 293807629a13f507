#!/bin/sh
# Rebuild the shipped GPU profiles from aiconfigurator-core (the `gpu-data` extra) and print
# each import's wall time. Acceptance is *published* where profiler/imported/published_library.py covers
# the proposer's kind and the target's family (EAGLE-3 on Llama-3.1-8B: vLLM's CI baseline, which
# sets the eagle3 rates below aside), else *assumed* (survival per position) until measured entries
# replace it (specplan profile merge). Run from the repository root.
set -e
PY=${PY:-python}
A1="llama-3.2-1b=0.7,0.49,0.343,0.24,0.168,0.118,0.082,0.058"
A2="eagle3=0.75,0.5625,0.4219,0.3164,0.2373,0.178,0.1335,0.1001"
# n-gram: survival given a proposal and the proposal rate (20.6 % of steps) as measured for SmolLM2-135M at
# temperature 0 on this CPU (profiles/smollm2-135m-cpu.json) -- another model, so *assumed* here.
A3="ngram=0.784,0.701,0.634,0.575,0.543,0.508"
R3="ngram=0.206"
run() {  # system target tp out [more --draft flags]
  sys=$1 target=$2 tp=$3 out=$4
  shift 4
  $PY -m cli profile import-aiconfigurator --system "$sys" --backend vllm --backend-version 0.24.0 \
    --target "$target" --draft meta-llama/Llama-3.2-1B --draft eagle3 --draft ngram "$@" --tp "$tp" \
    --assume-acceptance "$A1" --assume-acceptance "$A2" --assume-acceptance "$A3" \
    --assume-proposal-rate "$R3" -o "profiles/$out.json"
}
run h200_sxm meta-llama/Llama-3.1-8B 1 llama-3.1-8b-h200-vllm
# + the EAGLE-1 head SpecDecode-Bench ran (bench/specdecode_bench_targets.py; acceptance from its traces)
run h100_sxm meta-llama/Llama-3.1-8B 1 llama-3.1-8b-h100-vllm --draft eagle
run h100_sxm meta-llama/Llama-3.1-70B 4 llama-3.1-70b-h100-tp4-vllm
run h200_sxm meta-llama/Llama-3.1-70B 2 llama-3.1-70b-h200-tp2-vllm
# gpt-oss-120B (docs/fidelity-gpu.md section 4)
$PY -m cli profile import-aiconfigurator --system h200_sxm --backend vllm --backend-version 0.24.0 \
  --target openai/gpt-oss-120b --draft eagle3 --assume-acceptance eagle3=0.7,0.49,0.343,0.24,0.168 \
  -o profiles/gpt-oss-120b-h200-vllm.json

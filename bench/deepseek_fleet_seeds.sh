#!/bin/sh
# DeepSeek-R1 with and without MTP on 8x H200 replicas: `specplan capacity` at 5, 20 and 50 req/s
# with the scenario's seeds (added while undetermined) and with 10 seeds, then `specplan simulate`
# of each candidate alone at capacity's N and N-1 on 10 fresh seeds (101-110). Prints one line per
# run: replicas per candidate, seeds used, wall time. Timing imported from aiconfigurator-core
# (vLLM 0.24.0; the `gpu-data` extra); MTP acceptance *assumed* (0.85 for its one token).
# The profile (~100 kB) and every output go to a temp folder. Run from the repository root.
set -e
PY=${PY:-python}
ROOT=$(pwd)
W=${W:-$(mktemp -d)}
echo "work folder: $W"
$PY -m cli profile import-aiconfigurator --system h200_sxm --backend vllm --backend-version 0.24.0 \
  --target deepseek-ai/DeepSeek-R1 --tp 8 --ep 8 --draft mtp -o "$W/ds-r1-h200.json" > "$W/import.log"
cat > "$W/ds-r1.toml" <<'EOF'
name = "ds-r1-mtp-h200"
description = "DeepSeek-R1 on 8x H200 (TP 8, EP 8) with MTP vs without, chat 1k -> 250 tokens"
[run]
duration_s = 60
warmup_s = 10
seeds = [1, 2]
[workload]
arrival = "poisson"
rate = 20
client_timeout_s = 120
[[workload.segments]]
name = "chat"
share = 1.0
prompt_tokens = {dist = "uniform", min = 900, max = 1100}
output_tokens = {dist = "uniform", min = 200, max = 300}
acceptance = {task = "chat", language = "any"}
temperature = 0.0
[slo]
ttft_ms = 2000
tpot_ms = 50
percentile = 95
[fleet]
profile = "ds-r1-h200.json"
replicas = 1
tensor_parallel_size = 8
routing = "least_outstanding"
price_per_gpu_hour = 4.0
draft_price_per_hour = 0.0
[[candidates]]
name = "baseline"
speculation = "off"
[[candidates]]
name = "mtp-k1"
proposer = "mtp"
k = 1
policy = "fixed"
assumed_acceptance = [0.85]
EOF
cd "$W"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
for R in 5 20 50; do
  for S in default ten; do
    extra=""; [ $S = ten ] && extra="--seeds 1,2,3,4,5,6,7,8,9,10"
    t0=$(date +%s)
    $PY -m cli capacity ds-r1.toml --target-rate $R --no-profile-band --json $extra > cap_${R}_${S}.json
    $PY - "$R" "$S" "$(( $(date +%s) - t0 ))" <<'EOF'
import json, sys
r, s, wall = sys.argv[1:]
d = json.load(open(f"cap_{r}_{s}.json"))
parts = []
for c in d["candidates"]:
    n = f"{c['replicas_low']} or {c['replicas']}" if c["replicas_undetermined"] else str(c["replicas"])
    parts.append(f"{c['candidate']} {n} (capacity {c['capacity_rps_mean']:.2f} {c['capacity_rps_interval']} req/s per replica)")
print(f"capacity {r} req/s, seeds {s}: {'; '.join(parts)}; {len(d['candidates'][0]['per_seed'])} seeds; winner "
      f"{d['decision']['winner']}; {wall} s")
for c in d["candidates"]:
    with open(f"n_{r}_{s}_{c['candidate']}", "w") as f:
        f.write(f"{c['replicas'] or 0}")
EOF
  done
  for C in baseline mtp-k1; do
    N=$(cat n_${R}_default_$C)
    for n in $((N - 1)) $N; do
      [ "$n" -ge 1 ] || continue
      sed -e "s/^rate = .*/rate = $R/" -e "s/^replicas = .*/replicas = $n/" ds-r1.toml > at_${R}_${n}.toml
      $PY -m cli simulate at_${R}_${n}.toml --quiet --json --candidates $C \
        --seeds 101,102,103,104,105,106,107,108,109,110 > sim_${R}_${C}_${n}.json
      $PY - "$R" "$C" "$n" <<'EOF'
import json, sys
r, c, n = sys.argv[1:]
d = json.load(open(f"sim_{r}_{c}_{n}.json"))["decision"]
st = d["standings"][0]
print(f"  simulate {c} alone on {n} replica(s) at {r} req/s, seeds 101-110: {d['reasons'][0]['found']} "
      f"[{st['status']}: {st['why']}]")
EOF
    done
  done
done

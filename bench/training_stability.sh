#!/usr/bin/env bash
# Training at a real size through the service: the 37M-parameter Performer of the issue that found
# the early-round divergence (d_model 768, 6 layers, 12 heads, d_ff 3072, sqr features, post-LN,
# L = 512, 2,048 tokens per round, AdamW at 1e-4) on C library headers, on a coordinator and two
# workers with 3 GiB budgets each — once with the reference implementation's initialisation and no
# warm-up (--init_readout_scale=1 --warmup_steps=0), once with slimfit's defaults. Prints the loss
# and gradient norm of every round of both jobs (BENCHMARKS.md, "Does training at real sizes stay
# stable?").
#
# Usage: bench/training_stability.sh [ROUNDS]   (default 8; about 20 s per round on 2 cores)
set -euo pipefail
rounds="${1:-8}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-stability.XXXXXX)" stability

data="$work/headers.txt"
cluster_write_headers "$data"
cluster_calibrate >/dev/null
cluster_start_coordinator
for i in 0 1; do cluster_start_worker 3GiB; done
cluster_wait_workers 2

model=(--d_model=768 --layers=6 --heads=12 --d_ff=3072 --feature_map=sqr --ln=post --sequence_length=512
       --tokens_per_round=2048 --rounds="$rounds" --learning_rate=1e-4 --seed=1 --min_workers=2)
run() {  # label, extra flags...
  local label="$1"; shift
  local job; job="$(cluster_submit "$label" "${model[@]}" "$@" --data="$data" --separator='\n\n\n')"
  "$slimfit" watch "$job" --from_start --json > "$work/$label.events" || true
  echo "$label ($*):"
  python3 - "$work/$label.events" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    event = json.loads(line)
    done = event.get("round_completed")
    if done:
        print("  round %3d  loss %7.4f  |g| %8.2f  lr %.2e  %5.1f s" % (int(done["round"]), done["loss"],
              done.get("gradient_norm", 0), done.get("learning_rate", 0), done.get("round_seconds", 0)))
PY
}
run reference --init_readout_scale=1 --warmup_steps=0
run defaults

#!/usr/bin/env bash
# Synchronous rounds against local steps (JobSpec.local_steps, DiLoCo) on the same corpus, model
# and number of trained tokens: a coordinator and three workers on loopback train the demo's
# model (2-layer byte-level Performer, d_model 128, L = 1024) on the demo's pre-training corpus
# (Debian's licence texts), STEPS batches of 16 sequences (16,384 tokens) in all — STEPS
# synchronous rounds, or STEPS / H rounds of H local steps — and prints, per mode, the held-out
# bits per byte before and after, the bytes on the wire (parameters to the workers and results
# back, from RoundCompleted.timing) per trained token, and the wall time (BENCHMARKS.md,
# "How many bytes do local steps and int8 save, and at what loss?").
#
# Usage: bench/local_steps.sh [STEPS] [MODES]   (defaults 100 and "sync 10 50 50+int8"; a mode is
#        "sync", or H, which must divide STEPS, optionally "+ENC" with ENC float16, bfloat16 or int8:
#        pseudo-gradients and parameter differences in that encoding)
#   OUTER="--outer_learning_rate=1 --outer_momentum=0.9"  other outer-optimizer flags for the
#        local-steps modes (default: the coordinator's, Nesterov SGD at 0.7 with momentum 0.9)
set -euo pipefail
steps="${1:-100}"
modes="${2:-sync 10 50 50+int8}"
source "$(dirname "${BASH_SOURCE[0]}")/local_steps_modes.sh"
modes_check local_steps.sh "$steps" "$modes"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-localsteps.XXXXXX)" localsteps

data="$work/pretrain.txt"
cluster_write_licences "$data"
cluster_calibrate >/dev/null
cluster_start_coordinator
# Room for AdamW's inner state (four copies of the 0.46M parameters) beside each worker's plan.
for budget in 16MiB 24MiB 64MiB; do cluster_start_worker "$budget"; done
cluster_wait_workers 3

printf '%-9s %6s %12s | %9s %9s | %12s %10s | %8s\n' mode rounds "inner steps" "bpb before" "bpb after" \
  "MB on wire" "B/token" "wall"
for mode in $modes; do
  mode_settings "$mode" "$steps" "${OUTER:-}"
  started="$(date +%s.%N)"
  job="$(mode_submit "$mode" "$rounds" 0 "$data" "${local_flags[@]}")"
  "$slimfit" watch "$job" --from_start --json > "$work/$mode.events" || { echo "job $job ($mode) failed" >&2; exit 1; }
  wall="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
  read -r before after to_workers from_workers tokens < <(python3 bench/job_events.py "$work/$mode.events" local_steps.sh)
  awk -v mode="$mode" -v rounds="$rounds" -v inner="$inner" -v before="$before" -v after="$after" \
    -v wire="$((to_workers + from_workers))" -v tokens="$tokens" -v wall="$wall" \
    'BEGIN { printf "%-9s %6d %12d | %9.3f %9.3f | %12.1f %10.1f | %7.1fs\n", mode, rounds, rounds * inner,
             before, after, wire / 1e6, wire / tokens, wall }'
done

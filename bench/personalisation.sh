#!/usr/bin/env bash
# Personalisation (JobSpec.trainable) against training every parameter, on worker-local data: a
# coordinator and three workers on loopback, each holding its own group of C headers
# (slimfit-worker --data); the demo's model (2-layer byte-level Performer, d_model 128, L = 1024)
# is trained for ROUNDS rounds of 8 sequences over the three local datasets, once with every
# parameter and once per PATTERNS entry, and each run prints the held-out bits per byte before and
# after, the bytes on the wire each way (RoundCompleted.timing) and per trained token, and the wall
# time (BENCHMARKS.md, "What do worker-local data and personalisation give?").
#
# Usage: bench/personalisation.sh [ROUNDS] [PATTERNS...]   (defaults 30 and
#        "layers.1.*,output_logit_map.*" "output_logit_map.*")
set -euo pipefail
rounds="${1:-30}"
shift || true
patterns=("$@")
[ "${#patterns[@]}" -gt 0 ] || patterns=("layers.1.*,output_logit_map.*" "output_logit_map.*")
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-personal.XXXXXX)" personal

names=()
groups=("stdio.h stdlib.h string.h ctype.h" "unistd.h pthread.h signal.h fcntl.h" "math.h time.h wchar.h locale.h")
for g in 0 1 2; do
  : > "$work/local$g.txt"
  for h in ${groups[$g]}; do
    [ -f "/usr/include/$h" ] && { cat "/usr/include/$h"; printf '\n\n\n'; } >> "$work/local$g.txt"
  done
  names+=("local$g")
done
cluster_calibrate >/dev/null
cluster_start_coordinator
budgets=(8MiB 12MiB 48MiB)
for g in 0 1 2; do
  cluster_start_worker "${budgets[$g]}" "--data=local$g=$work/local$g.txt" --data_separator='\n\n\n'
done
cluster_wait_workers 3

printf '%-32s | %9s %9s | %10s %10s %9s | %8s\n' trainable "bpb before" "bpb after" "MB out" "MB back" "B/token" wall
for trainable in "" "${patterns[@]}"; do
  flags=()
  [ -n "$trainable" ] && flags=(--trainable="$trainable")
  started="$(date +%s.%N)"
  job="$(cluster_submit "personal$RANDOM" --d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024 \
    --local_data="$(IFS=,; echo "${names[*]}")" --tokens_per_round=8192 --rounds="$rounds" --learning_rate=1e-3 \
    --warmup_steps=5 --gradient_clip_norm=1 --held_out_fraction=0.05 --eval_interval=0 --seed=3 "${flags[@]}")"
  "$slimfit" watch "$job" --from_start --json > "$work/$job.events" || { echo "job $job failed" >&2; exit 1; }
  wall="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
  read -r before after to_workers from_workers tokens < <(python3 bench/job_events.py "$work/$job.events" personalisation.sh)
  awk -v label="${trainable:-(all)}" -v before="$before" -v after="$after" -v out="$to_workers" \
    -v back="$from_workers" -v tokens="$tokens" -v wall="$wall" \
    'BEGIN { printf "%-32s | %9.3f %9.3f | %10.2f %10.2f %9.1f | %7.1fs\n", label, before, after, out / 1e6,
             back / 1e6, (out + back) / tokens, wall }'
done

#!/usr/bin/env bash
# What the operator endpoints cost the coordinator: GET /metrics and GET /status (the status page's
# content, with the client token) timed with curl against a coordinator running the demo's model
# (2-layer byte-level Performer, d_model 128, L = 1024) on three workers of 8, 12 and 48 MiB, while
# the job trains. Prints, per endpoint, the median and the largest time of N requests and the size
# of the answer (BENCHMARKS.md, "What do the operator endpoints cost?").
#
# Usage: bench/ops_endpoints.sh [REQUESTS]   (default 50)
set -euo pipefail
requests="${1:-50}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-ops.XXXXXX)" ops

data="$work/licences.txt"
cluster_write_licences "$data" Apache-2.0 Artistic BSD GPL-2 GPL-3 LGPL-2.1 MPL-2.0
cluster_calibrate >/dev/null
cluster_start_coordinator
for budget in 8MiB 12MiB 48MiB; do cluster_start_worker "$budget"; done
cluster_wait_workers 3
job="$(cluster_submit ops --d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024 --data="$data" \
  --separator='\n\n\n' --tokens_per_round=16384 --rounds=100000 --learning_rate=3e-3 --held_out_fraction=0.1 \
  --eval_interval=5 --seed=1)"
until "$slimfit" status "$job" --json | grep -q '"rounds_completed": "[1-9]'; do sleep 1; done

measure() {  # label, curl arguments...
  local label="$1"
  shift
  local times=()
  for _ in $(seq 1 "$requests"); do
    times+=("$(curl -sS -o "$work/answer" -w '%{time_total}' "$@")")
  done
  printf '%s\n' "${times[@]}" | python3 -c '
import statistics, sys
times = [float(line) * 1000 for line in sys.stdin]
print("%-28s %8.1f ms %8.1f ms %9d bytes" % (sys.argv[1], statistics.median(times), max(times), int(sys.argv[2])))
' "$label" "$(wc -c < "$work/answer")"
}
echo "endpoint (${requests} requests)        median      max      answer"
measure "GET /metrics" "${SLIMFIT_STATUS_PAGE}metrics"
measure "GET /status (with token)" -H "Authorization: Bearer $SLIMFIT_TOKEN" "${SLIMFIT_STATUS_PAGE}status"
measure "GET / (the page itself)" "$SLIMFIT_STATUS_PAGE"
"$slimfit" cancel "$job" >/dev/null

#!/usr/bin/env bash
# A fine-tuning job on a mixed fleet through the real service, for the GPU machine: a coordinator,
# one worker on DEVICE (default cuda:0; budget DEVICE_BUDGET, default 8GiB) and one CPU worker
# (2 GiB, 4 threads), on loopback, train a 40M-parameter Performer (d_model 768, 6 layers, 12 heads,
# d_ff 3072, L = 512) on C library headers for ROUNDS rounds; prints the job's events, its status
# and the fleet.
# Binaries from scripts/cuda/CMakeLists.txt with -DSLIMFIT_SERVICE=ON (BIN is its build's bin/).
# The work folder (logs, state, profiles) is archived into OUT/service_work.tar.gz. WATCH_SECONDS
# (default 180) bounds the wait for the job.
#
# Usage (from the repository root): scripts/cuda/service_job.sh BIN OUT [ROUNDS]
set -euo pipefail
bin="$(cd "${1:?usage: service_job.sh BIN OUT [ROUNDS]}" && pwd)"
out="${2:?usage: service_job.sh BIN OUT [ROUNDS]}"
rounds="${3:-5}"
device="${DEVICE:-cuda:0}"
budget="${DEVICE_BUDGET:-8GiB}"  # a tight one (e.g. 700MiB) makes the planner slice, with CUDA graphs
mkdir -p "$out"
export CLUSTER_BIN="$bin"
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-service.XXXXXX)" service
archive() { tar -C "$work" -czf "$out/service_work.tar.gz" --exclude='*.safetensors' . 2>/dev/null || true; }
trap 'archive; cluster_cleanup' EXIT

data="$work/headers.txt"
cluster_write_headers "$data"
echo "== calibrating cpu and $device"
"$slimfit" calibrate --device=cpu --threads=4 --out="$work/cpu.profile"
"$slimfit" calibrate --device="$device" --out="$work/device.profile"
cat "$work/device.profile"
cluster_start_coordinator
CLUSTER_DEVICE="$device" CLUSTER_PROFILE="$work/device.profile" cluster_start_worker "$budget"
CLUSTER_THREADS=4 cluster_start_worker 2GiB
cluster_wait_workers 2
"$slimfit" workers
echo "== plan of the job's model on each device"
"$slimfit" plan --d_model=768 --layers=6 --heads=12 --d_ff=3072 --seq_len=512 --memory_budget="$budget" \
  --profile="$work/device.profile" || true
job="$(cluster_submit gpu-40m --d_model=768 --layers=6 --heads=12 --d_ff=3072 --sequence_length=512 \
  --tokens_per_round=4096 --rounds="$rounds" --learning_rate=1e-4 --seed=1 --min_workers=2 \
  --data="$data" --separator='\n\n\n')"
echo "== job $job"
timeout "${WATCH_SECONDS:-180}" "$slimfit" watch "$job" --from_start ||
  echo "== watch ended with status $? (124: still running after ${WATCH_SECONDS:-180} s)"
"$slimfit" status "$job"
"$slimfit" workers

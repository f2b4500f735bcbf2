#!/usr/bin/env bash
# Control-plane load: a coordinator (default flags: heartbeats every second) on loopback, a small
# job that needs every worker (--min_workers=WORKERS), and bazel-bin/bench/control_plane_load: WORKERS
# simulated workers (the real worker components in one process, bench/simulated_fleet.h) that
# register all at once, heartbeat and compute the job's shards for SECONDS, while 4 clients call
# GetJob and ListWorkers every 250 ms. Prints the client-side p50/p99/max of every RPC and the
# coordinator's CPU seconds and peak resident memory (BENCHMARKS.md, "How much control-plane load does
# a coordinator take?").
# Exit status 0 when every control RPC's p99 is below 100 ms without errors, 1 otherwise.
#
# With two or more CPUs, the coordinator runs on CPU 0 and the simulator on CPU 1 (taskset), as
# they would on separate machines: unpinned, the simulator's hundreds of threads (64 workers'
# servers, registrars, heartbeats) preempt the coordinator's handlers on a two-core machine and
# the measurement is of the scheduler, not the coordinator (RegisterWorker p99 ~210 ms unpinned
# vs ~35 ms pinned on the 2-core development machine). SLIMFIT_LOAD_PIN=0 turns pinning off.
#
# Usage: bench/control_plane_load.sh [WORKERS] [SECONDS] [--json] [--keep]   (defaults 64 and 60)
#   --keep   keep the work directory (the coordinator's log and state, the simulator's log)
set -euo pipefail

usage_error() { echo "control_plane_load.sh: $*; usage: bench/control_plane_load.sh [WORKERS] [SECONDS] [--json] [--keep]" >&2; exit 2; }
positional=() json=() keep=0
for arg in "$@"; do
  case "$arg" in
    --json) json=(--json) ;;
    --keep) keep=1 ;;
    -*) usage_error "unknown flag $arg" ;;
    *) positional+=("$arg") ;;
  esac
done
[ "${#positional[@]}" -le 2 ] || usage_error "too many arguments"
workers="${positional[0]:-64}" seconds="${positional[1]:-60}"
[[ "$workers" =~ ^[1-9][0-9]*$ ]] && [ "$workers" -le 1000 ] || usage_error "WORKERS must be 1 to 1000, got '$workers'"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] && [ "$seconds" -le 3600 ] || usage_error "SECONDS must be 1 to 3600, got '$seconds'"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --jobs=2 --show_progress_rate_limit=30 //server:slimfit-coordinator //client:slimfit \
  //bench:control_plane_load >&2
bin="$repo_root/bazel-bin"
slimfit="$bin/client/slimfit"
work="$(mktemp -d /tmp/slimfit-load.XXXXXX)"
coordinator_pid=""
load_pid=""
cleanup() {
  for pid in $load_pid $coordinator_pid; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    kill -0 "$coordinator_pid" 2>/dev/null || break
    sleep 0.1
  done
  for pid in $load_pid $coordinator_pid; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "$keep" = 1 ]; then echo "control_plane_load.sh: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() { echo "control_plane_load.sh: $*" >&2; [ -f "$work/coordinator.log" ] && tail -5 "$work/coordinator.log" >&2; exit 1; }
coordinator_cpus=() simulator_cpus=()
if [ "${SLIMFIT_LOAD_PIN:-1}" = 1 ] && command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ]; then
  coordinator_cpus=(taskset -c 0) simulator_cpus=(taskset -c 1-$(($(nproc) - 1)))
  echo "control_plane_load.sh: coordinator on CPU 0, simulator on CPUs 1-$(($(nproc) - 1))" >&2
else
  echo "control_plane_load.sh: coordinator and simulator share every CPU (not pinned)" >&2
fi
export SLIMFIT_TOKEN="load-client-$RANDOM$RANDOM" SLIMFIT_WORKER_TOKEN="load-worker-$RANDOM$RANDOM"

"$slimfit" calibrate --device=cpu --threads=1 --out="$work/cpu.profile" > /dev/null
"${coordinator_cpus[@]}" "$bin/server/slimfit-coordinator" --state_dir="$work/coordinator" --listen=127.0.0.1:0 \
  --port_file="$work/coordinator.port" > "$work/coordinator.log" 2>&1 &
coordinator_pid=$!
for _ in $(seq 1 300); do
  [ -s "$work/coordinator.port" ] && break
  kill -0 "$coordinator_pid" 2>/dev/null || fail "the coordinator exited while starting"
  sleep 0.1
done
[ -s "$work/coordinator.port" ] || fail "the coordinator did not start within 30 s"
export SLIMFIT_COORDINATOR="$(cat "$work/coordinator.port")"

# A small model (54k parameters), two sequences of 128 tokens per worker and round.
data="$work/licences.txt"
: > "$data"
for f in Apache-2.0 GPL-2 GPL-3 LGPL-2.1 MPL-2.0; do
  [ -f "/usr/share/common-licenses/$f" ] && { cat "/usr/share/common-licenses/$f"; printf '\n\n\n'; } >> "$data"
done
[ -s "$data" ] || fail "no licence texts in /usr/share/common-licenses to train on"
"$slimfit" submit --data="$data" --separator='\n\n\n' --d_model=32 --layers=2 --heads=2 --d_ff=128 \
  --sequence_length=128 --tokens_per_round=$((workers * 256)) --rounds=1000000 --min_workers="$workers" \
  --name=control-plane-load --json > "$work/job.json" || fail "the job was not accepted"
job="$(sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$work/job.json" | head -1)"
[ -n "$job" ] || fail "no job id in the submit answer"

"${simulator_cpus[@]}" "$bin/bench/control_plane_load" --coordinator="$SLIMFIT_COORDINATOR" --coordinator_pid="$coordinator_pid" \
  --job="$job" --profile="$work/cpu.profile" --state_dir="$work/fleet" --workers="$workers" \
  --duration_seconds="$seconds" "${json[@]}" 2> "$work/load.log" &
load_pid=$!
# Registration, the load, and deregistration, with room to spare.
for _ in $(seq 1 $(((seconds + 180) * 10))); do
  kill -0 "$load_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$load_pid" 2>/dev/null && fail "the load test did not finish within $((seconds + 180)) s"
status=0
wait "$load_pid" || status=$?
load_pid=""
[ "$status" -le 1 ] || { tail -3 "$work/load.log" >&2; fail "the load test failed (exit status $status)"; }
exit "$status"

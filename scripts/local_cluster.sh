# A coordinator and workers on loopback for scripts (sourced, not run): the demo and the benchmarks
# that drive the service end to end. Needs the three binaries built.
#
#   source scripts/local_cluster.sh
#   cluster_init /tmp/work "demo"             # work dir, name for messages; sets the tokens, a trap
#   cluster_calibrate                         # one CPU profile shared by the workers ($work/cpu.profile)
#   cluster_start_coordinator [FLAG...]       # exports SLIMFIT_COORDINATOR and SLIMFIT_STATUS_PAGE
#   cluster_start_worker 8MiB [FLAG...]       # worker 0, 1, ... with the shared profile
#                                             # (env CLUSTER_DEVICE, CLUSTER_THREADS, CLUSTER_PROFILE
#                                             # override cpu, 1 and $work/cpu.profile for that worker;
#                                             # CLUSTER_COORDINATOR, CLUSTER_LISTEN, CLUSTER_ADVERTISE
#                                             # the address it dials, binds and advertises)
#   cluster_wait_workers 3                    # until the coordinator lists 3 live workers
#   job="$(cluster_submit label [submit FLAG...])"   # the job id; its Job JSON in $work/label.json
#   cluster_write_headers FILE                # ten C library headers as documents (the benches' data)
#
# Every process started is stopped (SIGTERM, then waited for) when the script exits; the work
# directory is removed unless CLUSTER_KEEP=1.

cluster_repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cluster_bin="${CLUSTER_BIN:-$cluster_repo_root/bazel-bin}"  # CLUSTER_BIN: binaries laid out as bazel-bin
slimfit="$cluster_bin/client/slimfit"
cluster_pids=()
cluster_workers=0

cluster_cleanup() {
  for pid in "${cluster_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${cluster_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${CLUSTER_KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}

cluster_init() {  # work dir, name
  work="$1"
  cluster_name="$2"
  mkdir -p "$work"
  trap cluster_cleanup EXIT
  export SLIMFIT_TOKEN="$cluster_name-client-$RANDOM$RANDOM"
  export SLIMFIT_WORKER_TOKEN="$cluster_name-join-$RANDOM$RANDOM"
}

cluster_wait_for_file() {  # path, what
  for _ in $(seq 1 600); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "$cluster_name: $2 did not start; the logs:" >&2
  tail -n 20 "$work"/*.log >&2
  exit 1
}

cluster_calibrate() {
  "$slimfit" calibrate --device=cpu --threads=1 --out="$work/cpu.profile" "$@"
}

cluster_start_coordinator() {
  "$cluster_bin/server/slimfit-coordinator" --state_dir="$work/coordinator" --listen=127.0.0.1:0 \
    --port_file="$work/coordinator.port" --metrics_listen=127.0.0.1:0 \
    --metrics_port_file="$work/coordinator.metrics" "$@" > "$work/coordinator.log" 2>&1 &
  cluster_pids+=($!)
  cluster_wait_for_file "$work/coordinator.port" "the coordinator"
  export SLIMFIT_COORDINATOR="$(cat "$work/coordinator.port")"
  # The status page (open it with #token=$SLIMFIT_TOKEN after the slash) and /metrics.
  export SLIMFIT_STATUS_PAGE="http://$(cat "$work/coordinator.metrics")/"
}

cluster_start_worker() {  # budget, flags...
  local budget="$1" i="$cluster_workers"
  shift
  local advertise=()
  [ -n "${CLUSTER_ADVERTISE:-}" ] && advertise=(--advertise="$CLUSTER_ADVERTISE")
  "$cluster_bin/worker/slimfit-worker" --coordinator="${CLUSTER_COORDINATOR:-$SLIMFIT_COORDINATOR}" \
    --listen="${CLUSTER_LISTEN:-127.0.0.1:0}" "${advertise[@]}" \
    --device="${CLUSTER_DEVICE:-cpu}" --memory_budget="$budget" --threads="${CLUSTER_THREADS:-1}" \
    --state_dir="$work/worker$i" --profile="${CLUSTER_PROFILE:-$work/cpu.profile}" \
    --port_file="$work/worker$i.port" "$@" > "$work/worker$i.log" 2>&1 &
  cluster_pids+=($!)
  cluster_wait_for_file "$work/worker$i.port" "worker $i"
  cluster_workers=$((i + 1))
}

cluster_wait_workers() {  # count
  for _ in $(seq 1 300); do
    [ "$("$slimfit" workers --json 2>/dev/null | grep -c '"worker_id"' || true)" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "$cluster_name: fewer than $1 workers registered; the logs:" >&2
  tail -n 20 "$work"/*.log >&2
  exit 1
}

cluster_write_headers() {  # file: ten C library headers, documents separated by '\n\n\n' (the benches' data)
  : > "$1"
  for h in stdio.h stdlib.h string.h unistd.h pthread.h math.h time.h wchar.h signal.h fcntl.h; do
    [ -f "/usr/include/$h" ] && { cat "/usr/include/$h"; printf '\n\n\n'; } >> "$1"
  done
  return 0
}

cluster_write_licences() {  # file [names...]: Debian's licence texts (default: the demo's ten), '\n\n\n' between
  local file="$1"
  shift
  local names=("$@")
  [ "${#names[@]}" -gt 0 ] || names=(Apache-2.0 Artistic BSD CC0-1.0 GFDL-1.3 GPL-2 GPL-3 LGPL-2.1 MPL-2.0 MPL-1.1)
  : > "$file"
  for f in "${names[@]}"; do
    [ -f "/usr/share/common-licenses/$f" ] && { cat "/usr/share/common-licenses/$f"; printf '\n\n\n'; } >> "$file"
  done
  return 0
}

cluster_submit() {  # label, submit flags... → prints the job id
  local label="$1"
  shift
  "$slimfit" submit --name="$label" "$@" --json > "$work/$label.json" || return 1
  sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$work/$label.json" | head -1
}

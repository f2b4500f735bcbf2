#!/usr/bin/env bash
# Chaos: one job trained while its processes are killed and frozen at random, and what it must
# still be at the end. On loopback, a coordinator and N workers (budgets 8, 12 and 48 MiB in turn,
# so they run different plans) train a small byte-level Performer on the licence texts every Debian
# machine has. First the job runs undisturbed; then the same spec runs again while, at random
# moments (every 4–12 s), one of these happens to a random process:
#   worker-kill        kill -9 a worker, then start it again (same state directory: same id)
#   worker-stop        SIGSTOP a worker for 1–6 s, then SIGCONT (longer than --lost_after_ms=2000:
#                      it is LOST and its shard reassigned; shorter: its shard is just late)
#   coordinator-kill   kill -9 the coordinator, then start it again on the same address and state
#                      directory: the job resumes from its last checkpoint (every 5 rounds here,
#                      so the rounds since are computed again and must not count twice)
#   coordinator-stop   SIGSTOP the coordinator for 1–6 s, then SIGCONT
# At the end (otherwise it fails: exit status 1, and a last line "chaos: FAILED: <reason>"):
#   - no daemon exited by itself, and the disturbed job SUCCEEDED;
#   - its exported model is within --tolerance (default 1e-5, relative L2 over all parameters) of
#     the undisturbed run's. Not bit-for-bit: two undisturbed runs are bit-identical (the split of
#     a round follows the workers' profiles, and each worker keeps its plan), but while a worker is
#     missing its sequences are computed by others, under other plans (full back-propagation,
#     C = 64, C = 128) and grouped into other shards, so the rounding differs, and training can
#     amplify that: in float32 a 116-round run ended 1e-7 apart, but in a 447-round one the
#     losses' difference, ~3e-8 for 200 rounds, then doubled about every 40 rounds and the models
#     ended 4e-5 apart (BENCHMARKS.md, "Does a job survive kills and freezes?"). Hence float64 by
#     default: its rounding starts some 1e9 times smaller;
#   - no round counted twice or lost: tokens_trained is the sum over its distinct rounds and equals
#     the undisturbed run's, and a round redone after a coordinator restart has the tokens and
#     (to 1e-5) the loss it had the first time (bazel-bin/bench/audit_job);
#   - no worker was quarantined and no spot check disagreed: disturbing honest workers must not
#     look like lying.
# The number of rounds is chosen from a 5-round probe so that the disturbed run lasts about
# MINUTES; the whole script takes a little over twice that, plus ~1 minute of set-up.
#
# Usage: scripts/chaos.sh MINUTES [--workers=N] [--seed=S] [--dtype=float32|float64]
#                                 [--tolerance=X] [--keep]
#   MINUTES     how long to disturb the job (a positive number, e.g. 5 or 0.5)
#   --workers   workers (default 3)
#   --seed      seeds the disturbances (kinds, victims, moments; default: random, printed)
#   --dtype     the job's dtype (default float64; see above)
#   --tolerance largest relative L2 distance accepted between the two models (default 1e-5)
#   --keep      keep the work directory (logs, state, both models); it is kept anyway on failure
set -euo pipefail

usage_error() { echo "chaos: $*; usage: scripts/chaos.sh MINUTES [--workers=N] [--seed=S] [--dtype=float32|float64] [--tolerance=X] [--keep]" >&2; exit 2; }

minutes="" workers=3 seed="$RANDOM" dtype=float64 tolerance=1e-5 keep=0
for arg in "$@"; do
  case "$arg" in
    --workers=*) workers="${arg#*=}" ;;
    --seed=*) seed="${arg#*=}" ;;
    --dtype=*) dtype="${arg#*=}" ;;
    --tolerance=*) tolerance="${arg#*=}" ;;
    --keep) keep=1 ;;
    -*) usage_error "unknown flag $arg" ;;
    *) [ -z "$minutes" ] || usage_error "unexpected argument $arg"; minutes="$arg" ;;
  esac
done
[ -n "$minutes" ] || usage_error "MINUTES is required"
[[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v m="$minutes" 'BEGIN { exit !(m > 0) }' ||
  usage_error "MINUTES must be a positive number, got '$minutes'"
[[ "$workers" =~ ^[1-9][0-9]?$ ]] || usage_error "--workers must be 1 to 99, got '$workers'"
[[ "$seed" =~ ^[0-9]+$ ]] || usage_error "--seed must be a non-negative integer, got '$seed'"
[[ "$dtype" = float32 || "$dtype" = float64 ]] || usage_error "--dtype must be float32 or float64, got '$dtype'"
[[ "$tolerance" =~ ^[0-9.]+(e-?[0-9]+)?$ ]] || usage_error "--tolerance must be a number, got '$tolerance'"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --jobs=2 --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker \
  //client:slimfit //bench:compare_models //bench:audit_job
bin="$repo_root/bazel-bin"
slimfit="$bin/client/slimfit"

work="$(mktemp -d /tmp/slimfit-chaos.XXXXXX)"
coordinator_pid=""
worker_pids=()
finished=0
cleanup() {
  local pids=("${worker_pids[@]}")
  [ -n "$coordinator_pid" ] && pids+=("$coordinator_pid")
  # A stopped process handles SIGTERM only once continued.
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # On failure the directory is kept, and fail's line (the last one) names it.
  if [ "$finished" = 0 ]; then return; fi
  if [ "$keep" = 1 ]; then echo "chaos: work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

log() { printf '%s chaos: %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { echo "chaos: FAILED: $* (logs in $work)" >&2; exit 1; }

export SLIMFIT_TOKEN="chaos-client-$RANDOM$RANDOM" SLIMFIT_WORKER_TOKEN="chaos-worker-$RANDOM$RANDOM"
RANDOM="$seed"  # from here on the disturbances follow the seed

wait_for_port_file() {  # file, pid, what
  for _ in $(seq 1 300); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || fail "$3 exited while starting; see its log"
    sleep 0.1
  done
  fail "$3 did not start within 30 s; see its log"
}

listen="127.0.0.1:0"
start_coordinator() {
  rm -f "$work/coordinator.port"
  "$bin/server/slimfit-coordinator" --state_dir="$work/coordinator" --listen="$listen" \
    --heartbeat_interval_ms=250 --lost_after_ms=2000 --shard_timeout_seconds=60 \
    --port_file="$work/coordinator.port" >> "$work/coordinator.log" 2>&1 &
  coordinator_pid=$!
  wait_for_port_file "$work/coordinator.port" "$coordinator_pid" "the coordinator"
  listen="$(cat "$work/coordinator.port")"  # restarts reuse the address the workers know
  export SLIMFIT_COORDINATOR="$listen"
}

budgets=(8MiB 12MiB 48MiB)
start_worker() {  # index
  local i="$1"
  rm -f "$work/worker$i.port"
  "$bin/worker/slimfit-worker" --coordinator="$listen" --listen=127.0.0.1:0 --device=cpu \
    --memory_budget="${budgets[$((i % 3))]}" --threads=1 --state_dir="$work/worker$i" \
    --profile="$work/cpu.profile" --port_file="$work/worker$i.port" >> "$work/worker$i.log" 2>&1 &
  worker_pids[i]=$!
  wait_for_port_file "$work/worker$i.port" "${worker_pids[$i]}" "worker $i"
}

check_alive() {  # every daemon still running: one that exited by itself is a crash, and a failure
  kill -0 "$coordinator_pid" 2>/dev/null ||
    fail "the coordinator (pid $coordinator_pid) exited by itself; see coordinator.log"
  for ((j = 0; j < workers; j++)); do
    kill -0 "${worker_pids[$j]}" 2>/dev/null || fail "worker $j (pid ${worker_pids[$j]}) exited by itself; see worker$j.log"
  done
}

kill_and_reap() {  # pid
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

job_state() {  # job: JOB_STATE_…, or "unreachable" while the coordinator is down or frozen
  "$slimfit" status "$1" --json --timeout=5 2>/dev/null | sed -n 's/.*"state": *"\([A-Z_]*\)".*/\1/p' | head -1 ||
    true
}

job_id_of() { sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$1" | head -1; }

log "seed $seed, $workers workers, disturbing for about $minutes minutes; work directory $work"
data="$work/licences.txt"
: > "$data"
for f in Apache-2.0 Artistic BSD CC0-1.0 GFDL-1.3 GPL-2 GPL-3 LGPL-2.1 MPL-2.0 MPL-1.1; do
  [ -f "/usr/share/common-licenses/$f" ] && { cat "/usr/share/common-licenses/$f"; printf '\n\n\n'; } >> "$data"
done
[ -s "$data" ] || fail "no licence texts in /usr/share/common-licenses to train on"
"$slimfit" calibrate --device=cpu --threads=1 --out="$work/cpu.profile" > /dev/null
start_coordinator
for ((i = 0; i < workers; i++)); do start_worker "$i"; done
live_workers() {  # registered workers now, IDLE or BUSY
  "$slimfit" workers --json --timeout=2 2>/dev/null | grep -c '"WORKER_STATE_IDLE"\|"WORKER_STATE_BUSY"' || true
}
live=0
deadline=$((SECONDS + 30))
while [ "$SECONDS" -lt "$deadline" ]; do
  live="$(live_workers)"
  [ "$live" -ge "$workers" ] && break
  sleep 0.2
done
[ "$live" -ge "$workers" ] || fail "only $live of $workers workers registered within 30 s"
log "coordinator at $listen, $workers workers live"

spec=(--d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024 --tokens_per_round=16384
      --learning_rate=3e-3 --warmup_steps=10 --gradient_clip_norm=1 --held_out_fraction=0.05
      --eval_interval=25 --checkpoint_interval=5 --seed=7 --dtype="$dtype" --data="$data" --separator='\n\n\n')

timeout 300 "$slimfit" submit "${spec[@]}" --name=probe --rounds=5 --watch --json > "$work/probe.watch" ||
  fail "the 5-round probe job did not succeed; see probe.watch and the logs"
# Seconds per round from the rounds themselves (set-up excluded). Disturbances cost time (a lost
# worker's shard waits for --lost_after_ms, a restart redoes rounds), but the machine's load varies
# more than that: the disturbed run lasts MINUTES give or take a third.
probe_seconds="$(grep -o '"round_seconds": *[0-9.e+-]*' "$work/probe.watch" | awk -F: '{ s += $2 } END { printf "%.1f", s }')"
awk -v p="$probe_seconds" 'BEGIN { exit !(p > 0) }' || fail "the probe job reported no round times; see probe.watch"
rounds="$(awk -v m="$minutes" -v p="$probe_seconds" 'BEGIN { r = int(m * 60 / (p / 5)); print (r < 10 ? 10 : r) }')"
log "probe: 5 rounds in ${probe_seconds} s; the job gets $rounds rounds"

calm_started=$SECONDS
"$slimfit" submit "${spec[@]}" --name=undisturbed --rounds="$rounds" --json > "$work/calm.json"
calm_job="$(job_id_of "$work/calm.json")"
timeout $((rounds * 30 + 300)) "$slimfit" watch "$calm_job" > "$work/calm.watch" ||
  fail "the undisturbed job $calm_job did not succeed; see calm.watch"
calm_seconds=$((SECONDS - calm_started))
"$slimfit" export "$calm_job" --out="$work/undisturbed.safetensors" > /dev/null
log "undisturbed run $calm_job: $rounds rounds in ${calm_seconds} s"

chaos_started=$SECONDS
"$slimfit" submit "${spec[@]}" --name=disturbed --rounds="$rounds" --json > "$work/chaos.json"
chaos_job="$(job_id_of "$work/chaos.json")"
log "disturbed run $chaos_job started"
declare -A count=([worker-kill]=0 [worker-stop]=0 [coordinator-kill]=0 [coordinator-stop]=0)
kinds=(worker-kill worker-stop coordinator-kill coordinator-stop)
give_up_at=$((SECONDS + calm_seconds * 4 + 600))
state=""
while :; do
  sleep "$((4 + RANDOM % 9))"
  state="$(job_state "$chaos_job")"
  case "$state" in JOB_STATE_SUCCEEDED | JOB_STATE_FAILED | JOB_STATE_CANCELLED) break ;; esac
  [ "$SECONDS" -lt "$give_up_at" ] || fail "the disturbed job $chaos_job is still $state after $((SECONDS - chaos_started)) s"
  check_alive
  kind="${kinds[$((RANDOM % 4))]}"
  pause="$((1 + RANDOM % 6))"
  i="$((RANDOM % workers))"
  case "$kind" in
    worker-kill)
      log "kill -9 worker $i (pid ${worker_pids[$i]}), then restart it"
      kill_and_reap "${worker_pids[$i]}"
      start_worker "$i" ;;
    worker-stop)
      log "SIGSTOP worker $i (pid ${worker_pids[$i]}) for $pause s"
      kill -STOP "${worker_pids[$i]}"; sleep "$pause"; kill -CONT "${worker_pids[$i]}" ;;
    coordinator-kill)
      log "kill -9 the coordinator (pid $coordinator_pid), then restart it"
      kill_and_reap "$coordinator_pid"
      start_coordinator ;;
    coordinator-stop)
      log "SIGSTOP the coordinator (pid $coordinator_pid) for $pause s"
      kill -STOP "$coordinator_pid"; sleep "$pause"; kill -CONT "$coordinator_pid" ;;
  esac
  count[$kind]=$((count[$kind] + 1))
done
chaos_seconds=$((SECONDS - chaos_started))
total=$((count[worker-kill] + count[worker-stop] + count[coordinator-kill] + count[coordinator-stop]))
log "disturbed run $chaos_job: $state after ${chaos_seconds} s and $total disturbances"

check_alive
echo "== disturbances: ${count[worker-kill]} worker kill -9, ${count[worker-stop]} worker SIGSTOP/SIGCONT," \
     "${count[coordinator-kill]} coordinator kill -9 and restart, ${count[coordinator-stop]} coordinator SIGSTOP/SIGCONT"
[ "$state" = JOB_STATE_SUCCEEDED ] || fail "the disturbed job $chaos_job ended $state; see coordinator.log"
"$slimfit" export "$chaos_job" --out="$work/disturbed.safetensors" > /dev/null ||
  fail "the disturbed job $chaos_job could not be exported"
echo "== the disturbed model against the undisturbed one"
compared=0
"$bin/bench/compare_models" "$work/disturbed.safetensors" "$work/undisturbed.safetensors" --tolerance="$tolerance" 2>&1 |
  tee "$work/compare.txt" || compared=$?
echo "== the disturbed job's record against the undisturbed one's"
audited=0
"$bin/bench/audit_job" "$chaos_job" --reference="$calm_job" 2>&1 | tee "$work/audit.txt" || audited=$?
echo "== seed $seed, $workers workers, $dtype, $rounds rounds of 16,384 tokens; undisturbed ${calm_seconds} s," \
     "disturbed ${chaos_seconds} s"
# One line saying what failed, the first check first.
[ "$compared" = 0 ] || fail "the disturbed model against the undisturbed one: $(head -1 "$work/compare.txt")"
if [ "$audited" != 0 ]; then
  reason="$(grep -m1 '^problem: ' "$work/audit.txt" | sed 's/^problem: //' || true)"
  fail "the audit of $chaos_job: ${reason:-$(tail -1 "$work/audit.txt")}"
fi
finished=1
if grep -q '^bit-identical: yes' "$work/compare.txt"; then
  echo "chaos: passed (the disturbed model is bit-identical to the undisturbed one; no round counted twice)"
else
  echo "chaos: passed ($(head -1 "$work/compare.txt" | sed 's/ over .*//'); no round counted twice)"
fi

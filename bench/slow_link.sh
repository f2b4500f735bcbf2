#!/usr/bin/env bash
# Synchronous rounds against local steps over slow links: bench/local_steps.sh's job (the demo's
# model and pre-training corpus, three workers, STEPS batches of 16,384 tokens), but each worker
# talks to the coordinator, and the coordinator to it, only through its own link of RATE Mbit/s in
# each direction (bench/throttle_proxy.py: bandwidth only, no latency). Prints per mode the
# held-out bits per byte against seconds since the job started running, the seconds to reach
# TARGET bits per byte, the bytes on the wire and the wall time (BENCHMARKS.md, "How many bytes do
# local steps and int8 save, and at what loss?").
#
# Usage: bench/slow_link.sh [RATE_MBIT] [TARGET_BPB] [STEPS] [MODES]
#   defaults 10, 4.3, 100 and "sync 10 10+int8 50+int8"; modes as in bench/local_steps.sh.
#   Local-steps modes use plain averaging as the outer step (OUTER overrides, e.g.
#   OUTER="--outer_learning_rate=0.7 --outer_momentum=0.9"). Held-out evaluation every
#   EVAL_BATCHES batches (default 10; local steps: every max(1, EVAL_BATCHES / H) rounds).
set -euo pipefail
rate="${1:-10}"
target="${2:-4.3}"
steps="${3:-100}"
modes="${4:-sync 10 10+int8 50+int8}"
eval_batches="${EVAL_BATCHES:-10}"
[[ "$rate" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "slow_link.sh: RATE_MBIT must be a number, got '$rate'" >&2; exit 2; }
[[ "$target" =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "slow_link.sh: TARGET_BPB must be a number, got '$target'" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/local_steps_modes.sh"
modes_check slow_link.sh "$steps" "$modes"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-slowlink.XXXXXX)" slowlink

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

data="$work/pretrain.txt"
cluster_write_licences "$data"
cluster_calibrate >/dev/null
cluster_start_coordinator
coordinator_port="${SLIMFIT_COORDINATOR##*:}"
# One link per worker: its calls to the coordinator go up through the proxy, the coordinator's
# calls to it come down through the same proxy (it advertises the proxy's address).
i=0 proxies=()
for budget in 16MiB 24MiB 64MiB; do
  up="$(free_port)" down="$(free_port)" listen="$(free_port)"
  python3 bench/throttle_proxy.py --rate_mbit="$rate" --up="$up:127.0.0.1:$coordinator_port" \
    --down="$down:127.0.0.1:$listen" --ready_file="$work/link$i.ready" --stats_file="$work/link$i.stats" \
    > "$work/link$i.log" 2>&1 &
  cluster_pids+=($!)
  proxies+=($!)
  cluster_wait_for_file "$work/link$i.ready" "link $i"
  CLUSTER_COORDINATOR="127.0.0.1:$up" CLUSTER_LISTEN="127.0.0.1:$listen" CLUSTER_ADVERTISE="127.0.0.1:$down" \
    cluster_start_worker "$budget"
  i=$((i + 1))
done
cluster_wait_workers 3

echo "links: $rate Mbit/s each way per worker; target: $target held-out bits per byte"
printf '%-9s %6s | %9s %9s | %14s | %12s %10s | %8s\n' mode rounds "bpb before" "bpb after" \
  "s to target" "MB on wire" "B/token" "wall"
for mode in $modes; do
  mode_settings "$mode" "$steps" "${OUTER:---outer_learning_rate=1 --outer_momentum=0}"
  eval_interval=$((eval_batches / inner))
  [ "$eval_interval" -ge 1 ] || eval_interval=1
  started="$(date +%s.%N)"
  job="$(mode_submit "$mode" "$rounds" "$eval_interval" "$data" "${local_flags[@]}")"
  "$slimfit" watch "$job" --from_start --json > "$work/$mode.events" || { echo "job $job ($mode) failed" >&2; exit 1; }
  wall="$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
  python3 - "$work/$mode.events" "$mode" "$rounds" "$inner" "$wall" "$target" <<'PY'
import datetime, json, sys
path, mode, rounds, inner, wall, target = sys.argv[1:7]
rounds, inner, wall, target = int(rounds), int(inner), float(wall), float(target)
def seconds(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
running, curve, wire, tokens = None, [], 0, 0
for line in open(path):
    event = json.loads(line)
    changed = event.get("state_changed")
    if changed and changed.get("state") == "JOB_STATE_RUNNING" and running is None:
        running = seconds(event["time"])
    if "evaluation" in event:
        curve.append((seconds(event["time"]), int(event["evaluation"].get("round", 0)),
                      float(event["evaluation"].get("bits_per_byte", 0))))
    done = event.get("round_completed")
    if done:
        timing = done.get("timing", {})
        wire += int(timing.get("bytes_to_workers", 0)) + int(timing.get("bytes_from_workers", 0))
        tokens += int(done.get("tokens", 0))
if running is None or len(curve) < 2 or tokens == 0:
    sys.exit("slow_link.sh: no start, evaluations or rounds in " + path)
reached = next((t - running for t, _, bpb in curve if bpb <= target), None)
print("%-9s %6d | %9.3f %9.3f | %14s | %12.1f %10.1f | %7.1fs" % (
    mode, rounds, curve[0][2], curve[-1][2], "%.1f" % reached if reached is not None else "not reached",
    wire / 1e6, wire / tokens, wall))
print("          curve (s since running, batches, bpb): " + ", ".join(
    "%.0f/%d/%.3f" % (t - running, r * inner, bpb) for t, r, bpb in curve))
PY
done
# What crossed each link, all modes together (the proxies write it when they stop).
for pid in "${proxies[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
for i in 0 1 2; do
  [ -s "$work/link$i.stats" ] && echo "link $i: $(cat "$work/link$i.stats")"
done

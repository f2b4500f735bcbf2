#!/usr/bin/env bash
# Where a round's time goes at real model sizes: a coordinator and three workers on loopback
# (3 GiB budgets, one compute thread each, sharing this machine's cores) train byte-level
# Performers of about 10M, 40M and 100M parameters (L = 512, by default one sequence per worker
# per round, AdamW, float32) on C library headers, and the script prints, per size, the mean over rounds
# 2..ROUNDS of RoundCompleted.timing (docs/OPERATIONS.md): the coordinator's phases (waiting,
# shards in flight, aggregation after the waves, optimizer step through publishing), the workers'
# summed seconds (parameter fetch, engine compute, result streaming), the bytes each way, the
# seconds from one round's end to the next's (the round plus what runs between rounds: checkpoints
# and evaluations), the coordinator's peak resident memory and the largest of the workers' (both
# since the processes started, so over every size run so far), and over every round the shards
# spot-checked (each holds two whole results for its check) and summed as they arrived
# (BENCHMARKS.md, "Where do a 100M model's round time and coordinator memory go?").
#
# Usage: bench/round_data_path.sh [ROUNDS] [SIZES]   (defaults 4 and "10M 40M 100M")
#   COORDINATOR_FLAGS="--max_assembly_bytes=4GiB"   extra slimfit-coordinator flags
#   SUBMIT_FLAGS="--verify_fraction=0.34"           extra `slimfit submit` flags
#   TOKENS_PER_ROUND=6144                            tokens a round (default 1536: one sequence per worker)
set -euo pipefail
rounds="${1:-4}"
sizes="${2:-10M 40M 100M}"
[[ "$rounds" =~ ^[0-9]+$ ]] && [ "$rounds" -ge 2 ] || { echo "round_data_path.sh: ROUNDS must be ≥ 2" >&2; exit 2; }
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-datapath.XXXXXX)" datapath

data="$work/headers.txt"
cluster_write_headers "$data"
cluster_calibrate >/dev/null
# shellcheck disable=SC2086  # word splitting of the extra flags is wanted
cluster_start_coordinator ${COORDINATOR_FLAGS:-}
coordinator_pid="${cluster_pids[-1]}"
worker_pids=()
for i in 0 1 2; do cluster_start_worker 3GiB; worker_pids+=("${cluster_pids[-1]}"); done
cluster_wait_workers 3

shape() {
  case "$1" in
    10M) echo "--d_model=384 --layers=6 --heads=6 --d_ff=1536" ;;
    40M) echo "--d_model=768 --layers=6 --heads=12 --d_ff=3072" ;;
    100M) echo "--d_model=1024 --layers=8 --heads=16 --d_ff=4096" ;;
    *) echo "round_data_path.sh: unknown size $1 (10M, 40M, 100M)" >&2; exit 2 ;;
  esac
}

printf '%-5s %12s %7s %7s | %6s %7s %6s %6s | %6s %8s %6s | %8s %8s | %6s | %s | %s\n' size parameters round every \
  wait shards aggr step fetch compute stream "MB out" "MB in" ckpt "coordinator peak RSS (shards checked / streamed)" \
  "largest worker peak RSS"
for size in $sizes; do
  read -r -a model <<< "$(shape "$size")"
  job="$(cluster_submit "$size" "${model[@]}" --sequence_length=512 --tokens_per_round="${TOKENS_PER_ROUND:-1536}" --rounds="$rounds" \
    --learning_rate=1e-4 --checkpoint_interval=1 --seed=1 --min_workers=3 --data="$data" --separator='\n\n\n' \
    ${SUBMIT_FLAGS:-})"
  "$slimfit" watch "$job" --from_start --json > "$work/$size.events" || { echo "job $job of size $size failed" >&2; exit 1; }
  peak_kib="$(awk '/VmHWM/ {print $2}' "/proc/$coordinator_pid/status")"
  worker_peak_kib="$(for pid in "${worker_pids[@]}"; do awk '/VmHWM/ {print $2}' "/proc/$pid/status"; done | sort -n | tail -1)"
  python3 - "$work/$size.events" "$size" "$peak_kib" "$worker_peak_kib" "${model[@]}" <<'PY'
import json, sys
path, size, peak_kib, worker_peak_kib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shape = dict(arg[2:].split("=") for arg in sys.argv[5:])
d, layers, f, vocab = int(shape["d_model"]), int(shape["layers"]), int(shape["d_ff"]), 256
parameters = vocab * d // 2 + layers * (3 * (d * d + d) + 2 * f * d + f + d + 4 * d) + vocab * d + vocab
rounds, checkpoints, ends = [], [], {}
checked = streamed = 0
def seconds_of(stamp):  # RFC 3339, "…T18:25:35.123456789Z"
    import datetime
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    t = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc).timestamp()
    return t + (float("0." + fraction) if fraction else 0.0)
for line in open(path):
    event = json.loads(line)
    done = event.get("round_completed")
    if done:
        ends[int(done["round"])] = seconds_of(event["time"])  # the last completion of each round
        checked += int(done.get("verified_shards", 0))
        streamed += int(done.get("streamed_shards", 0))
    if done and int(done["round"]) >= 2:
        rounds.append(done)
    written = event.get("checkpoint_written")
    if written and int(written.get("round", 0)) >= 2:
        checkpoints.append(float(written.get("seconds", 0)))
if not rounds:
    sys.exit("round_data_path.sh: no rounds after the first in " + path)
def mean(f):
    return sum(f(r) for r in rounds) / len(rounds)
gaps = [ends[r] - ends[r - 1] for r in sorted(ends) if r >= 2 and r - 1 in ends]
every = sum(gaps) / len(gaps) if gaps else 0.0
t = lambda key: (lambda r: float(r.get("timing", {}).get(key, 0)))
print("%-5s %12s %6.2fs %6.2fs | %6.2f %7.2f %6.2f %6.2f | %6.2f %8.2f %6.2f | %8.1f %8.1f | %5.2fs | %.0f MiB (%d / %d) | %.0f MiB" % (
    size, "{:,}".format(parameters), mean(lambda r: float(r.get("round_seconds", 0))), every,
    mean(t("waiting_seconds")), mean(t("shards_seconds")), mean(t("aggregation_seconds")), mean(t("step_seconds")),
    mean(t("worker_fetch_seconds")), mean(t("worker_compute_seconds")), mean(t("worker_stream_seconds")),
    mean(lambda r: float(r.get("timing", {}).get("bytes_to_workers", 0))) / 1e6,
    mean(lambda r: float(r.get("timing", {}).get("bytes_from_workers", 0))) / 1e6,
    sum(checkpoints) / max(1, len(checkpoints)), peak_kib / 1024, checked, streamed, worker_peak_kib / 1024))
PY
done

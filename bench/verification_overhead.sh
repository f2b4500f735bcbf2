#!/usr/bin/env bash
# What spot-check verification costs and how closely honest workers agree: the demo's model
# (2-layer byte-level Performer, d_model 128, L = 1024, 16 sequences per round) trained on a
# coordinator (one sequence per shard, so 16 shards a round) and three workers whose budgets
# (8, 12, 48 MiB) make them run three different plans — once per verify_fraction. Prints, per
# fraction, the mean round time, the shards checked, and the relative differences of every pair of
# results compared (BENCHMARKS.md, "What do spot checks cost, and how closely do honest workers agree?").
#
# Usage: bench/verification_overhead.sh [ROUNDS] [FRACTION...]   (default 20 rounds; 0 0.05 0.25 1)
set -euo pipefail
rounds="${1:-20}"
shift || true
fractions=("$@")
[ ${#fractions[@]} -gt 0 ] || fractions=(0 0.05 0.25 1)
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit >/dev/null
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-verification.XXXXXX)" verification

data="$work/licences.txt"
cluster_write_licences "$data"
cluster_calibrate >/dev/null
cluster_start_coordinator --max_sequences_per_shard=1
for budget in 8MiB 12MiB 48MiB; do cluster_start_worker "$budget"; done
cluster_wait_workers 3

echo "verify_fraction  s/round  shards  checked  agreed  rel. difference: median      max  final loss"
for fraction in "${fractions[@]}"; do
  label="vf$fraction"
  job="$(cluster_submit "$label" --d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024 \
    --data="$data" --separator='\n\n\n' --tokens_per_round=16384 --rounds="$rounds" --learning_rate=3e-3 \
    --seed=1 --checkpoint_interval=1000 --verify_fraction="$fraction")"
  "$slimfit" watch "$job" --from_start --json > "$work/$label.events" || { echo "job $job failed" >&2; exit 1; }
  python3 - "$work/$label.events" "$fraction" <<'PY'
import json, statistics, sys
seconds, shards, checked, agreed, differences, loss = [], 0, 0, 0, [], float("nan")
for line in open(sys.argv[1]):
    event = json.loads(line)
    if "round_completed" in event:
        done = event["round_completed"]
        seconds.append(done.get("round_seconds", 0))
        shards += int(done.get("shards", 0))
        loss = done["loss"]
    if "shard_verified" in event:
        verified = event["shard_verified"]
        checked += 1
        if verified.get("agreed"):
            agreed += 1
            differences.append(verified.get("relative_difference", 0))
median = "%.1e" % statistics.median(differences) if differences else "-"
top = "%.1e" % max(differences) if differences else "-"
print("%15s  %7.3f  %6d  %7d  %6d  %24s  %7s  %10.4f" % (sys.argv[2], statistics.mean(seconds), shards, checked,
                                                        agreed, median, top, loss))
PY
done

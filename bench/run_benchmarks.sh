#!/usr/bin/env bash
# Runs every benchmark BENCHMARKS.md reports, one after another (timings need a quiet machine),
# writing one JSON-lines file per table into OUT_DIR (default /tmp/slimfit-bench).
# Usage: bench/run_benchmarks.sh [OUT_DIR]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out="${1:-/tmp/slimfit-bench}"
mkdir -p "$out"
bazel build //bench:all >/dev/null
b=bazel-bin/bench

$b/matmul_bench --threads=2 --sizes=512,1024,2048 > "$out/matmul.jsonl"
$b/linear_products_bench --rows=16,64,256,4096 --in=256 --out=1024 --threads=2 > "$out/linear_products.jsonl"
$b/prefix_kernel_bench --rows=16,64,256,4096 --threads=2 > "$out/prefix_kernels.jsonl"
for flags in "" "--forward_copies=false" "--fused_prefix=false"; do
  # shellcheck disable=SC2086
  $b/gradient_bench --seq_len=4096 --slice=0,64,16 --threads=2 --repeats=5 $flags
done > "$out/engine_kernels.jsonl"
$b/gradient_bench --seq_len=4096 --slice=0,1024,256,64,16 --threads=2 --repeats=3 --check_full > "$out/config_a.jsonl"
for c in 1024 256 64 16; do
  $b/gradient_bench --seq_len=$c --slice=0 --threads=2 --repeats=3
done > "$out/full_at_c.jsonl"
$b/gradient_bench --seq_len=4096,16384 --slice=64 --threads=2 --repeats=1 > "$out/long.jsonl"
for p in reverse store "resync --resync_every=64" "dp --slots=32"; do
  # shellcheck disable=SC2086
  $b/gradient_bench --seq_len=16384 --slice=16 --threads=2 --repeats=1 --check_full --front_policy=$p
done > "$out/drift.jsonl"
$b/gradient_bench --seq_len=4096 --slice=1024,256,64 --threads=2 --repeats=3 --recompute=layers > "$out/recompute.jsonl"
for tt in 0 2; do
  $b/gradient_bench --seq_len=4096 --slice=0,64,16 --threads=2 --torch_threads=$tt --repeats=1
done > "$out/threads.jsonl"
$b/plan_accuracy_bench --threads=2 --models=small,medium,large --seq_lens=1024,4096,16384 \
  --budgets_mib=24,48,96,192 > "$out/plan_accuracy.jsonl"
$b/plan_accuracy_bench --threads=2 --models=medium --seq_lens=4096 --budgets_mib=64,32,16 \
  --above_fixed --fixed_policies=false --repeats=3 > "$out/config_a_budgets.jsonl"
echo "results in $out"

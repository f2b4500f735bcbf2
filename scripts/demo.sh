#!/usr/bin/env bash
# slimfit demo: installs what is needed, builds, and shows the time/memory trade-off of the exact
# sliced gradient on this machine — one gradient of a 2-layer causal Performer LM (config A of
# BENCHMARKS.md) over a 4096-byte sequence, by full back-propagation and for slices of C tokens,
# with the gradient's relative discrepancy from the full one. Takes about a minute on 2 cores.
#
# Usage: scripts/demo.sh [extra gradient_bench flags, e.g. --seq_len=16384 --slice=0,64]
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

bash scripts/setup.sh
bazel build --show_progress_rate_limit=15 //bench:gradient_bench

threads=$(nproc)
# Random bytes are the default input; the demo reads real text when the machine has some.
tokens_flag=()
for text in /usr/share/common-licenses/GPL-3 /usr/share/dict/words; do
  if [ -f "$text" ] && [ "$(stat -c %s "$text")" -ge 4096 ]; then
    tokens_flag=(--tokens="$text")
    echo "input: the first 4096 bytes of $text"
    break
  fi
done

echo "model: d_model 256, 2 layers, 4 heads, d_ff 1024, sqr features, post-LN, float32, $threads threads"
echo "x_full: time relative to full back-propagation; working: peak minus parameters and gradients"
./bazel-bin/bench/gradient_bench --seq_len=4096 --slice=0,1024,256,64,16 --threads="$threads" \
  --repeats=1 --check_full --format=table "${tokens_flag[@]}" "$@"

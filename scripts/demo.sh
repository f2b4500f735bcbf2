#!/usr/bin/env bash
# slimfit demo: installs what is needed, builds, and runs the whole system on this machine — a
# coordinator and three workers on loopback whose memory budgets force three different plans
# (two different slice sizes C and ordinary back-propagation). It pre-trains a small byte-level
# Performer on the licence texts every Debian machine has (/usr/share/common-licenses), exports it,
# fine-tunes it on other text — the C library's headers (/usr/include, from libc6-dev, which the
# compiler setup.sh installs brings) — prints each worker's plan and the held-out bits per byte
# before and after fine-tuning, exports the result, has it write a few lines (`slimfit generate`),
# and stops every process it started. About
# three minutes on 2 cores once built; no network.
#
# With --local, the fine-tuning data never reaches the coordinator: each worker holds its own
# share of the C headers (slimfit-worker --data; a different group of headers on each), the
# fine-tuning job names those datasets (--local_data) and its shards run only on their holders. The
# demo then scores each group's unseen part before and after fine-tuning with `slimfit score` (on
# the machine that holds it), and checks that the coordinator's state directory holds none of it.
#
# Usage: scripts/demo.sh [--local] [--keep]    (--keep: leave the work directory for inspection)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
keep=0
local_data=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --local) local_data=1 ;;
    *) echo "usage: scripts/demo.sh [--local] [--keep]" >&2; exit 2 ;;
  esac
done

bash scripts/setup.sh
bazel build --show_progress_rate_limit=30 //server:slimfit-coordinator //worker:slimfit-worker //client:slimfit
source scripts/local_cluster.sh
cluster_init "$(mktemp -d /tmp/slimfit-demo.XXXXXX)" demo
CLUSTER_KEEP="$keep"

echo "== the data: Debian's licence texts (pre-training) and C library headers (fine-tuning)"
pretrain="$work/pretrain.txt"
cluster_write_licences "$pretrain"
finetune="$work/headers.txt"
: > "$finetune"
for h in stdio.h stdlib.h string.h unistd.h pthread.h math.h time.h wchar.h; do
  [ -f "/usr/include/$h" ] && { cat "/usr/include/$h"; printf '\n\n\n'; } >> "$finetune"
done
echo "pre-training: $(stat -c %s "$pretrain") bytes of 10 licences; fine-tuning: $(stat -c %s "$finetune") bytes of 8 C headers"

# --local: three groups of headers, one per worker; the last tenth of each is kept apart, unseen by
# training, to score the models on.
groups=(stdio:"stdio.h stdlib.h string.h ctype.h" posix:"unistd.h pthread.h signal.h fcntl.h"
        maths:"math.h time.h wchar.h locale.h")
worker_data=("" "" "")
if [ "$local_data" = 1 ]; then
  for g in 0 1 2; do
    name="c-${groups[$g]%%:*}"
    all="$work/$name.all.txt"
    : > "$all"
    for h in ${groups[$g]#*:}; do
      [ -f "/usr/include/$h" ] && { cat "/usr/include/$h"; printf '\n\n\n'; } >> "$all"
    done
    size="$(stat -c %s "$all")"
    head -c $((size * 9 / 10)) "$all" > "$work/$name.txt"
    tail -c +$((size * 9 / 10 + 1)) "$all" > "$work/$name.unseen.txt"
    worker_data[$g]="--data=$name=$work/$name.txt"
    echo "worker $g holds $name: $(stat -c %s "$work/$name.txt") bytes (${groups[$g]#*:}); $(stat -c %s "$work/$name.unseen.txt") more bytes kept unseen"
  done
fi

echo "== calibrating this CPU once (the three workers share it)"
cluster_calibrate

echo "== starting the coordinator and three workers"
cluster_start_coordinator
echo "coordinator at $SLIMFIT_COORDINATOR"
budgets=(8MiB 12MiB 48MiB)
for i in 0 1 2; do
  if [ "$local_data" = 1 ]; then
    cluster_start_worker "${budgets[$i]}" "${worker_data[$i]}" --data_separator='\n\n\n'
  else
    cluster_start_worker "${budgets[$i]}"
  fi
done
cluster_wait_workers 3
"$slimfit" workers

model=(--d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024)
echo
echo "== pre-training: 2-layer byte-level Performer, L = 1024, 16 sequences per round"
pretrain_job="$(cluster_submit pretrain "${model[@]}" --data="$pretrain" --separator='\n\n\n' \
  --tokens_per_round=16384 --rounds=120 --learning_rate=3e-3 --warmup_steps=10 --gradient_clip_norm=1 \
  --held_out_fraction=0.05 --eval_interval=40 --checkpoint_interval=20 --seed=1)"
echo "job $pretrain_job; the plan each worker runs for it:"
"$slimfit" plan --all --job="$pretrain_job"
sleep 5
"$slimfit" workers
"$slimfit" watch "$pretrain_job"
"$slimfit" export "$pretrain_job" --out="$work/pretrained.safetensors"

if [ "$local_data" = 1 ]; then
  echo
  echo "== fine-tuning the pre-trained model on the workers' own headers (they never leave the workers)"
  finetune_job="$(cluster_submit finetune "${model[@]}" --local_data=c-stdio,c-posix,c-maths \
    --init="$work/pretrained.safetensors" --tokens_per_round=8192 --rounds=40 --learning_rate=1e-3 \
    --gradient_clip_norm=1 --held_out_fraction=0.05 --eval_interval=20 --checkpoint_interval=20 --seed=2)"
  "$slimfit" watch "$finetune_job" | tee "$work/finetune.watch"
  "$slimfit" export "$finetune_job" --out="$work/finetuned.safetensors"
  echo
  echo "== bits per byte on each worker's unseen headers, scored where they are held (slimfit score)"
  printf '%-8s %10s %10s\n' dataset before after
  for g in 0 1 2; do
    name="c-${groups[$g]%%:*}"
    score() { "$slimfit" score --model="$1" --data="$work/$name.unseen.txt" --separator='\n\n\n' \
      "${model[@]:0:4}" --threads=2 --json | grep -o '"bits_per_byte": *[0-9.]*' | grep -o '[0-9.]*$'; }
    printf '%-8s %10.3f %10.3f\n' "$name" "$(score "$work/pretrained.safetensors")" "$(score "$work/finetuned.safetensors")"
  done
  # The coordinator's state (uploads, layouts, checkpoints, events, logs) holds none of the headers:
  # pthread_mutex_lock appears in pthread.h and in no licence.
  if grep -rqa pthread_mutex_lock "$work/coordinator" "$work/coordinator.log"; then
    echo "the coordinator holds worker-local data: this is a bug" >&2
    exit 1
  fi
  echo "the coordinator's state directory and log hold none of the workers' headers (checked for 'pthread_mutex_lock')"
  exit 0
fi

echo
echo "== fine-tuning the pre-trained model on the C headers (10% held out)"
finetune_job="$(cluster_submit finetune "${model[@]}" --data="$finetune" --separator='\n\n\n' \
  --init="$work/pretrained.safetensors" --tokens_per_round=8192 --rounds=40 --learning_rate=1e-3 \
  --gradient_clip_norm=1 --held_out_fraction=0.1 --eval_interval=20 --checkpoint_interval=20 --seed=2)"
"$slimfit" watch "$finetune_job" | tee "$work/finetune.watch"
"$slimfit" export "$finetune_job" --out="$work/finetuned.safetensors"

before="$(grep -m1 'evaluation before round 1' "$work/finetune.watch" | grep -o '[0-9.]* bits/byte')"
after="$(grep 'evaluation after round' "$work/finetune.watch" | tail -1 | grep -o '[0-9.]* bits/byte')"
echo
echo "== held-out bits per byte on the C headers: before fine-tuning $before, after $after"
echo
echo "== the fine-tuned model continues a prompt (slimfit generate: the recurrent form, constant memory per token)"
"$slimfit" generate --model="$work/finetuned.safetensors" --prompt='#include <' --max_tokens=400 \
  --temperature=0.7 --top_k=20 --seed=1 --threads=2
echo
echo "demo done: the fine-tuned model is $work/finetuned.safetensors$([ "$keep" = 1 ] || echo ' (removed with the work directory; run with --keep to keep it)')"

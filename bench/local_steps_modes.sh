# The modes bench/local_steps.sh and bench/slow_link.sh compare, and the job they both run (sourced
# after scripts/local_cluster.sh, not run):
#   modes_check SCRIPT STEPS "MODES"        exits 2 with one line unless STEPS is a positive integer
#                                           and every mode is "sync" or H[+float16|+bfloat16|+int8]
#                                           with H dividing STEPS
#   mode_settings MODE STEPS "OUTER FLAGS"  sets rounds, inner and local_flags for one mode
#   mode_submit MODE ROUNDS EVAL_INTERVAL "$data" [FLAG...]   the demo's model on $data, 16,384
#                                           tokens a round; prints the job id
modes_check() {  # script, steps, modes
  local script="$1" steps="$2" mode
  [[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "$script: STEPS must be a positive integer, got '$steps'" >&2; exit 2; }
  for mode in $3; do
    [ "$mode" = sync ] && continue
    [[ "$mode" =~ ^([1-9][0-9]*)(\+(float16|bfloat16|int8))?$ ]] && [ $((steps % BASH_REMATCH[1])) -eq 0 ] ||
      { echo "$script: mode '$mode' is neither sync nor H[+float16|+bfloat16|+int8] with H dividing $steps" >&2
        exit 2; }
  done
}

mode_settings() {  # mode, steps, outer-optimizer flags for local-steps modes
  local mode="$1" outer_flags
  local_flags=() rounds="$2" inner=1
  [ "$mode" = sync ] && return 0
  inner="${mode%%+*}" rounds=$(($2 / inner))
  read -r -a outer_flags <<< "$3"
  local_flags=(--local_steps="$inner" "${outer_flags[@]}")
  if [[ "$mode" == *+* ]]; then
    local_flags+=(--compress_pseudo_gradients="${mode#*+}" --compress_parameters="${mode#*+}")
  fi
}

mode_submit() {  # mode, rounds, eval interval, data, flags...
  local mode="$1" rounds="$2" eval_interval="$3" data="$4"
  shift 4
  cluster_submit "mode-$mode" --d_model=128 --layers=2 --heads=4 --d_ff=512 --sequence_length=1024 \
    --data="$data" --separator='\n\n\n' --tokens_per_round=16384 --rounds="$rounds" "$@" \
    --learning_rate=3e-3 --warmup_steps=10 --gradient_clip_norm=1 --held_out_fraction=0.05 \
    --eval_interval="$eval_interval" --checkpoint_interval=1000000 --seed=1 --min_workers=3
}

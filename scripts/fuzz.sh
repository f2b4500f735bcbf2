#!/usr/bin/env bash
# Runs slimfit's libFuzzer targets (//fuzz) for a fixed time each:
#
#   scripts/fuzz.sh SECONDS [--merge] [TARGET...]
#   scripts/fuzz.sh --build-only [TARGET...]
#
# Builds them with clang-14, AddressSanitizer and libFuzzer (--config=fuzz) in a separate Bazel
# output base ($SLIMFIT_FUZZ_OUTPUT_BASE, default ~/.cache/slimfit-fuzz), so the ordinary gcc
# build's cache is untouched, then runs each TARGET (default: every target; names as in
# fuzz/corpus/, e.g. safetensors) for SECONDS seconds on a copy of its corpus
# fuzz/corpus/TARGET. --merge adds the inputs that found new coverage to fuzz/corpus/TARGET
# (minimised with libFuzzer's -merge=1); without it the repository is not touched.
# --build-only builds the targets and stops (scripts/test.sh builds them this way in the background,
# at the lowest CPU priority, while the main suite runs); it first stops a Bazel server left on the
# output base, so that the one doing the build starts at the caller's priority (Bazel's server,
# not its client, runs the compilers), and gives the server's scheduling group that priority too.
#
# Prints one summary line per target (executions, executions per second, edge coverage and what
# the run added to it, corpus growth) and exits 1 if any target crashed, hung (an input over
# SLIMFIT_FUZZ_TIMEOUT), ran out of memory (3 GiB), leaked or broke an invariant: the input is kept
# under out/fuzz/TARGET/ and the line says how to reproduce it. Full libFuzzer logs are in
# out/fuzz/TARGET/fuzz.log. Environment: SLIMFIT_FUZZ_JOBS (build jobs, default 2),
# SLIMFIT_FUZZ_PARALLEL (targets fuzzed at a time, one core each; default: the number of cores),
# SLIMFIT_FUZZ_TIMEOUT (seconds one input may take, default 20).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

usage() {
  echo "usage: scripts/fuzz.sh SECONDS [--merge] [TARGET...] | --build-only [TARGET...]   (targets: $(ls fuzz/corpus | tr '\n' ' '))" >&2
  exit 2
}
[ $# -ge 1 ] || usage
build_only=0
if [ "$1" = "--build-only" ]; then
  build_only=1
  seconds=0
else
  seconds="$1"
  [[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -ge 1 ] || usage
fi
shift
merge=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --merge) [ "$build_only" -eq 0 ] || usage; merge=1 ;;
    -*) usage ;;
    *)
      [ -d "fuzz/corpus/$arg" ] || { echo "fuzz.sh: unknown target $arg" >&2; usage; }
      # Each target once: two runs of one target would share its artifacts and corpus copy.
      [[ " ${targets[*]} " == *" $arg "* ]] || targets+=("$arg")
      ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/corpus)
fi
parallel="${SLIMFIT_FUZZ_PARALLEL:-$(nproc)}"
[[ "$parallel" =~ ^[0-9]+$ ]] && [ "$parallel" -ge 1 ] || {
  echo "fuzz.sh: SLIMFIT_FUZZ_PARALLEL must be a positive number of targets, not '$parallel'" >&2
  exit 2
}

bash scripts/setup.sh

output_base="${SLIMFIT_FUZZ_OUTPUT_BASE:-$HOME/.cache/slimfit-fuzz}"
bazel_fuzz=(bazel "--output_base=$output_base")
labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:${t}_fuzzer"); done
build_start=$SECONDS
if [ "$build_only" -eq 1 ]; then
  "${bazel_fuzz[@]}" shutdown >/dev/null 2>&1 || true
  # Bazel's server runs in a session of its own; where the kernel schedules sessions as groups
  # (autogroup, /proc/sys/kernel/sched_autogroup_enabled), a process's nice value weighs only
  # against its own group, and a niced server's compilers would still take a full share of the
  # CPU from the main suite's (measured: twice as slow while both ran). The group's own nice is set
  # to the caller's.
  own_nice="$(nice)"
  server_pid="$("${bazel_fuzz[@]}" info server_pid 2>/dev/null || true)"
  if [ "$own_nice" -gt 0 ] && [ -n "$server_pid" ] && [ -w "/proc/$server_pid/autogroup" ]; then
    echo "$own_nice" >"/proc/$server_pid/autogroup" 2>/dev/null || true
  fi
fi
"${bazel_fuzz[@]}" build --config=fuzz --jobs="${SLIMFIT_FUZZ_JOBS:-2}" --color=no --curses=no \
  --show_progress_rate_limit=30 "${labels[@]}"
echo "fuzz.sh: built ${#targets[@]} targets in $((SECONDS - build_start)) s"
[ "$build_only" -eq 0 ] || exit 0
bin="$("${bazel_fuzz[@]}" info --config=fuzz bazel-bin 2>/dev/null)/fuzz"

work="$(mktemp -d "${TMPDIR:-/tmp}/slimfit-fuzz.XXXXXX")"
# Stops the targets still fuzzing (on an interrupt or an error: each job's fuzzer is its child)
# before their files are removed.
stop_targets() {
  local job
  for job in $(jobs -p); do
    pkill -TERM -P "$job" 2>/dev/null || true
    kill "$job" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap 'stop_targets; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

# Nothing is suppressed: LibTorch, gRPC and protobuf (not instrumented, but their mallocs and frees
# go through ASan) trip neither alloc-dealloc checks nor LeakSanitizer, per input or at exit, over
# every corpus. Leaks are checked per input (libFuzzer's -detect_leaks) and at exit.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)}"

# Fuzzes target $1 for $seconds seconds and prints its summary line (with the log's key lines when
# it failed); returns 1 if it failed. Targets run $parallel at a time, each in its own process.
fuzz_one() {
  local t="$1"
  local artifacts="$repo_root/out/fuzz/$t"
  mkdir -p "$artifacts" || { echo "$t: could not create $artifacts"; return 1; }
  rm -f "$artifacts"/crash-* "$artifacts"/timeout-* "$artifacts"/leak-* "$artifacts"/oom-* "$artifacts"/slow-unit-*
  local corpus="$work/corpus/$t"
  # (errexit does not apply inside a function called before ||.)
  mkdir -p "$corpus" && cp -r "fuzz/corpus/$t/." "$corpus/" || {
    echo "$t: could not copy its corpus to $corpus"
    return 1
  }
  local seeds
  seeds=$(find "$corpus" -type f | wc -l)
  local options=(-max_total_time="$seconds" -timeout="${SLIMFIT_FUZZ_TIMEOUT:-20}" -rss_limit_mb=3072
                 -print_final_stats=1 -artifact_prefix="$artifacts/" -close_fd_mask=1)
  [ -f "fuzz/dict/$t.dict" ] && options+=(-dict="fuzz/dict/$t.dict")
  local log="$artifacts/fuzz.log"
  local rc=0
  "$bin/${t}_fuzzer" "${options[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
  local executions rate start_coverage coverage size finding slow result failed=0
  executions=$(stat number_of_executed_units)
  rate=$(stat average_exec_per_sec)
  # Edge coverage after loading the corpus (INITED) and at the end: what the run added.
  start_coverage=$(grep -m1 -E 'INITED +cov: ' "$log" | grep -oE 'cov: [0-9]+' | cut -d' ' -f2 || true)
  coverage=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
  size=$(find "$corpus" -type f | wc -l)
  finding=$(ls "$artifacts" | grep -E '^(crash|timeout|leak|oom)-' | head -1 || true)
  slow=$(ls "$artifacts" | grep -E '^slow-unit-' | head -1 || true)
  if [ "$rc" -eq 0 ] && [ -z "$finding" ]; then
    result="ok"
    # libFuzzer keeps an input slower than 10 s (-report_slow_units): worth a look, not a failure.
    [ -n "$slow" ] && result="ok (slowest input kept: $artifacts/$slow)"
  else
    failed=1
    if [ -n "$finding" ]; then
      result="FAILED (exit $rc): input $artifacts/$finding; reproduce: $bin/${t}_fuzzer $artifacts/$finding"
    else
      result="FAILED (exit $rc): see $log"
    fi
  fi
  local coverage_text="${coverage:-?}"
  if [ -n "${start_coverage:-}" ] && [ -n "${coverage:-}" ]; then
    coverage_text="$coverage (+$((coverage - start_coverage)))"
  fi
  printf '%-22s %7s %11s %8s %-16s %-11s %s\n' "$t" "$seconds" "${executions:-?}" "${rate:-?}" "$coverage_text" \
    "$seeds→$size" "$result"
  if [ -n "$finding" ] || [ "$rc" -ne 0 ]; then
    grep -E 'ERROR: |fuzz invariant failed|SUMMARY: |^==[0-9]+==' "$log" | head -5 | sed 's/^/    /' || true
  fi
  if [ "$merge" -eq 1 ] && [ -z "$finding" ] && [ "$rc" -eq 0 ]; then
    "$bin/${t}_fuzzer" -merge=1 -close_fd_mask=3 "fuzz/corpus/$t" "$corpus" \
      >"$artifacts/merge.log" 2>&1 || { echo "fuzz.sh: merging $t failed: $artifacts/merge.log"; failed=1; }
    echo "    merged: fuzz/corpus/$t now holds $(find "fuzz/corpus/$t" -type f | wc -l) inputs"
  fi
  return "$failed"
}

# libFuzzer runs on one core: on a 2-core machine two targets at a time halve the wall time without
# giving any target fewer executions.
echo "fuzz.sh: fuzzing ${#targets[@]} targets for ${seconds} s each, ${parallel} at a time"
mkdir -p "$work/summary"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  ( status=0; fuzz_one "$t" >"$work/summary/$t" 2>&1 || status=$?; echo "$status" >"$work/summary/$t.status" ) &
  running=$((running + 1))
done
wait

failed=0
printf '%-22s %7s %11s %8s %-16s %-11s %s\n' target seconds executions exec/s "coverage (new)" corpus result
for t in "${targets[@]}"; do
  cat "$work/summary/$t"
  [ "$(cat "$work/summary/$t.status" 2>/dev/null)" = 0 ] || failed=1
done
exit "$failed"

#!/usr/bin/env bash
# Builds and runs every test of the workspace offline (Bazel 4.2.3 from Debian), tuned for a 2-core
# CI machine. Before the tests: the clang-format check (scripts/check_format.sh) and the check
# that the CUDA build's source list matches the Bazel targets (scripts/cuda/check_sources.sh).
# After them: the check that docs/CLI.md matches the programs' help (scripts/gen_cli_docs.sh
# --check), the unit tests of base/, server/ and worker/ under ThreadSanitizer (scripts/tsan.sh;
# SLIMFIT_TSAN=0 skips it), then every fuzz target briefly (scripts/fuzz.sh, $SLIMFIT_FUZZ_SECONDS seconds each,
# default 10; 0 skips it), so a decoder that now crashes, hangs or leaks on a mutated input fails
# CI. The fuzz targets' clang build runs in the background meanwhile at the lowest CPU priority
# (nice 19): it takes the cores only where the main suite leaves them idle (end-to-end tests
# waiting on heartbeats and deadlines), and what it has not built by then is built after. After
# it, in the same background job and output base, scripts/thread_safety.sh compiles base/,
# server/, worker/ and client/ with clang's -Wthread-safety as errors (skipped with the fuzzing
# when SLIMFIT_FUZZ_SECONDS=0). Works from any directory. Every check's failure is reported at the
# end; the last line is "N passed, N failed", and the exit status is non-zero if any test or check
# failed or anything failed to build. Extra arguments are passed to `bazel test` (e.g.
# scripts/test.sh --test_filter=Foo.*).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

bash scripts/setup.sh

# Formatting first (seconds): a failure is reported at the end, after the tests have run.
format_rc=0
bash scripts/check_format.sh || format_rc=$?

# The CUDA build's own source list (scripts/cuda/CMakeLists.txt) against the Bazel targets it
# mirrors (seconds, bazel query only); a failure is reported at the end.
cuda_sources_rc=0
bash scripts/cuda/check_sources.sh || cuda_sources_rc=$?

log="$(mktemp "${TMPDIR:-/tmp}/slimfit-test.XXXXXX.log")"
fuzz_build_log="$(mktemp "${TMPDIR:-/tmp}/slimfit-fuzz-build.XXXXXX.log")"
fuzz_build_pid=""
# On an interruption: the background build's whole process group (fuzz.sh and its Bazel client;
# the client's server then cancels the build).
stop_fuzz_build() {
  if [ -n "$fuzz_build_pid" ]; then
    kill -TERM -- "-$fuzz_build_pid" 2>/dev/null || true
    wait "$fuzz_build_pid" 2>/dev/null || true
  fi
}
thread_safety_log="$(mktemp "${TMPDIR:-/tmp}/slimfit-thread-safety.XXXXXX.log")"
tsan_log="$(mktemp "${TMPDIR:-/tmp}/slimfit-tsan.XXXXXX.log")"
trap 'stop_fuzz_build; rm -f "$log" "$fuzz_build_log" "$thread_safety_log" "$thread_safety_log.rc" "$tsan_log"' EXIT

fuzz_seconds="${SLIMFIT_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" -gt 0 ]; then
  # The job's exit status is the fuzz build's; the thread-safety build's goes to its .rc file.
  setsid -w nice -n 19 bash -c 'rc=0; bash scripts/fuzz.sh --build-only >"$1" 2>&1 || rc=$?
    ts=0; bash scripts/thread_safety.sh >"$2" 2>&1 || ts=$?; echo "$ts" >"$2.rc"; exit "$rc"' \
    _ "$fuzz_build_log" "$thread_safety_log" &
  fuzz_build_pid=$!
fi

flags=(
  --jobs=2
  --local_cpu_resources=HOST_CPUS
  --local_ram_resources=HOST_RAM*.6
  --keep_going
  --test_output=errors
  --test_summary=short
  --color=no
  --curses=no
  --show_progress_rate_limit=15
)

set +e
bazel test "${flags[@]}" "$@" -- //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e

# Per-target summary lines look like
#   //pkg:name          PASSED in 0.1s        //pkg:name     (cached) PASSED in 0.1s
#   //pkg:name          FAILED in 2.0s        //pkg:name     NO STATUS / TIMEOUT in 300.0s
#   //pkg:name          FAILED TO BUILD       //pkg:name     FLAKY, failed in 1 out of 2 ...
summary_re='^//[^[:space:]]+[[:space:]]+(\(cached\)[[:space:]]+)?'
passed=$(grep -cE "${summary_re}(PASSED|FLAKY)" "$log" || true)
failed=$(grep -cE "${summary_re}(FAILED|NO STATUS|TIMEOUT|INCOMPLETE|REMOTE FAILURE)" "$log" || true)

if [ "$rc" -eq 4 ] && grep -q 'No test targets were found' "$log"; then
  # Bazel's "no tests" exit code: nothing to run yet is not a failure.
  echo "test.sh: no test targets found under //..."
  echo "0 passed, 0 failed"
  exit 0
fi

if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "test.sh: bazel exited with code $rc (build or analysis errors above)"
fi

# docs/CLI.md against the binaries `bazel test //...` just built (no build of its own): a help text
# changed without regenerating the page fails CI, reported at the end.
cli_docs_rc=0
bash scripts/gen_cli_docs.sh --check --no_build || cli_docs_rc=$?

# The unit tests of base/, server/ and worker/ again under ThreadSanitizer (scripts/tsan.sh), in the
# same output base: only those packages' sources are compiled again, instrumented. Skipped with
# SLIMFIT_TSAN=0.
tsan_rc=0
if [ "${SLIMFIT_TSAN:-1}" != "0" ]; then
  tsan_start=$SECONDS
  bash scripts/tsan.sh >"$tsan_log" 2>&1 || tsan_rc=$?
  if [ "$tsan_rc" -eq 0 ]; then
    grep -a 'tsan.sh: ' "$tsan_log" | tail -1
  else
    echo "test.sh: the ThreadSanitizer run failed (exit $tsan_rc, $((SECONDS - tsan_start)) s):"
    grep -aE 'FAILED|ERROR: |SUMMARY: ThreadSanitizer|tsan.sh: ' "$tsan_log" | head -30 | sed 's/^/    /'
  fi
fi

fuzz_rc=0
thread_safety_rc=0
if [ "$fuzz_seconds" -gt 0 ]; then
  fuzz_start=$SECONDS
  echo "test.sh: waiting for the fuzz targets' and the thread-safety background builds"
  fuzz_build_rc=0
  wait "$fuzz_build_pid" || fuzz_build_rc=$?
  fuzz_build_pid=""
  if [ "$fuzz_build_rc" -eq 0 ]; then
    echo "test.sh: $(grep -a 'fuzz.sh: built' "$fuzz_build_log" | tail -1) in the background"
  else
    # fuzz.sh builds again below and fails there too if the build is broken; this says why it stopped.
    echo "test.sh: the background fuzz build exited $fuzz_build_rc; its log ends:"
    tail -20 "$fuzz_build_log" | sed 's/^/    /'
  fi
  thread_safety_rc="$(cat "$thread_safety_log.rc" 2>/dev/null || echo 1)"
  if [ "$thread_safety_rc" -eq 0 ]; then
    echo "test.sh: $(grep -a 'thread_safety.sh: ' "$thread_safety_log" | tail -1) in the background"
  else
    echo "test.sh: clang's thread-safety analysis failed (exit $thread_safety_rc):"
    if grep -qaE 'error: |ERROR: ' "$thread_safety_log"; then
      grep -aE 'error: |ERROR: ' "$thread_safety_log" | head -20 | sed 's/^/    /'
    else
      tail -20 "$thread_safety_log" | sed 's/^/    /'
    fi
  fi
  bash scripts/fuzz.sh "$fuzz_seconds" || fuzz_rc=$?
  if [ "$fuzz_rc" -eq 0 ]; then
    echo "test.sh: every fuzz target ran ${fuzz_seconds} s without a finding ($((SECONDS - fuzz_start)) s with its build)"
  else
    echo "test.sh: fuzzing failed (exit $fuzz_rc): see the lines above"
  fi
fi

if [ "$format_rc" -ne 0 ]; then echo "test.sh: sources are not clang-format clean (see check_format above)"; fi
if [ "$cli_docs_rc" -ne 0 ]; then echo "test.sh: the CLI reference check failed (see gen_cli_docs above)"; fi
if [ "$cuda_sources_rc" -ne 0 ]; then
  echo "test.sh: scripts/cuda/CMakeLists.txt and the Bazel targets disagree (see check_sources above)"
fi
if [ "$thread_safety_rc" -ne 0 ]; then echo "test.sh: thread-safety analysis failed (see above)"; fi
if [ "$tsan_rc" -ne 0 ]; then echo "test.sh: ThreadSanitizer found a race or a test failed under it (see above)"; fi
echo "${passed} passed, ${failed} failed"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$fuzz_rc" -ne 0 ] || [ "$format_rc" -ne 0 ] ||
  [ "$cli_docs_rc" -ne 0 ] || [ "$cuda_sources_rc" -ne 0 ] || [ "$thread_safety_rc" -ne 0 ] ||
  [ "$tsan_rc" -ne 0 ]; then
  exit 1
fi
exit 0

#!/usr/bin/env bash
# Runs the unit tests of base/, server/ and worker/ under ThreadSanitizer (--config=tsan, .bazelrc):
# those packages' sources are compiled with gcc's -fsanitize=thread, everything else (the engine,
# LibTorch, gRPC, Abseil) is not, and //third_party:tsan_absl_sync shows ThreadSanitizer what
# Debian's uninstrumented absl::Mutex, CondVar and Notification do. Reports inside Debian's
# uninstrumented libraries are suppressed (third_party/tsan_suppressions.txt, which says why); a
# report in our code fails its test. The end-to-end tests (//tests) are not run here, nor tests
# tagged no_tsan: they start daemons as separate processes and time them. Uses the ordinary build's output base: only the instrumented files
# are compiled again (and compiled back by the next ordinary build). Extra arguments go to
# `bazel test` (e.g. scripts/tsan.sh --test_filter=Foo.*). scripts/test.sh runs it after the tests.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

start=$SECONDS
query='tests(//base/... + //server/... + //worker/...) except attr(tags, "no_tsan", //...)'
targets_text="$(bazel query --color=no "$query")"
mapfile -t targets <<<"$targets_text"
rc=0
bazel test --config=tsan --jobs="${SLIMFIT_TSAN_JOBS:-2}" --keep_going --color=no --curses=no \
  --show_progress_rate_limit=30 --test_output=errors --test_summary=short \
  "--test_env=TSAN_OPTIONS=suppressions=$repo_root/third_party/tsan_suppressions.txt second_deadlock_stack=1" \
  --test_timeout=240,900,2700,3600 "$@" -- "${targets[@]}" || rc=$?
if [ "$rc" -eq 0 ]; then
  echo "tsan.sh: ${#targets[@]} unit tests of base/ server/ worker/ passed under ThreadSanitizer in $((SECONDS - start)) s"
else
  echo "tsan.sh: ThreadSanitizer run failed (bazel exit $rc; a report names the race in its test log)"
fi
exit "$rc"

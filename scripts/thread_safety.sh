#!/usr/bin/env bash
# Compiles the libraries and binaries of base/, server/, worker/ and client/ (compiles only, no
# links; test sources are left out: they hold no lock annotations of their own and would double the
# time) with clang-14's thread-safety analysis (-Wthread-safety -Werror=thread-safety, in
# --config=fuzz: .bazelrc), in the fuzz build's output base ($SLIMFIT_FUZZ_OUTPUT_BASE, default
# ~/.cache/slimfit-fuzz) so that what the fuzz targets already compiled is not compiled again.
# Exits non-zero, naming the file and the mutex, when a guarded member is touched without its lock
# or a function's lock annotations are broken. Environment: SLIMFIT_FUZZ_JOBS (build jobs,
# default 2). scripts/test.sh runs it in the background at nice 19 after the fuzz targets' build.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

output_base="${SLIMFIT_FUZZ_OUTPUT_BASE:-$HOME/.cache/slimfit-fuzz}"
start=$SECONDS
# compilation_outputs: the object files only (a link with LibTorch would add minutes).
query='kind("cc_library|cc_binary", //base/... + //server/... + //worker/... + //client/...)'
targets_text="$(bazel "--output_base=$output_base" query --color=no "$query")"
mapfile -t targets <<<"$targets_text"
bazel "--output_base=$output_base" build --config=fuzz --jobs="${SLIMFIT_FUZZ_JOBS:-2}" --keep_going \
  --color=no --curses=no --show_progress_rate_limit=30 --output_groups=compilation_outputs \
  -- "${targets[@]}"
echo "thread_safety.sh: ${#targets[@]} libraries and binaries of base/ server/ worker/ client/ compiled with -Wthread-safety in $((SECONDS - start)) s"

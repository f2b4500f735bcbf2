#!/usr/bin/env bash
# Checks that every C++ and CUDA source the repository tracks (third_party/ aside) is formatted as
# .clang-format says (clang-format 14, Debian's clang-format package). Prints the files that are not
# and exits 1; `scripts/check_format.sh --fix` formats them in place instead. Works from any
# directory; takes a second or two.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fix=0
if [ "${1:-}" = "--fix" ]; then fix=1; fi

mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
if [ "$fix" -eq 1 ]; then
  clang-format -i "${files[@]}"
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi

# One clang-format per batch of files (one per file takes a minute); --Werror reports each
# unformatted file as "<file>:<line>:<col>: error: code should be clang-formatted".
mapfile -t unformatted < <(printf '%s\0' "${files[@]}" |
  xargs -0 -n 64 clang-format --dry-run --Werror 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check_format: ${#unformatted[@]} of ${#files[@]} files are not clang-format clean (run scripts/check_format.sh --fix):"
  printf '    %s\n' "${unformatted[@]}"
  exit 1
fi
echo "check_format: all ${#files[@]} C++ files are clang-format clean"

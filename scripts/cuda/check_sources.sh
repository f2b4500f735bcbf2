#!/usr/bin/env bash
# Checks that scripts/cuda/CMakeLists.txt, which keeps its own list of sources for the GPU build,
# compiles exactly what the Bazel targets it mirrors compile. Those targets are found from the CMake
# file itself: every Bazel test or binary whose srcs hold a program CMake builds (its SLIMFIT_TESTS,
# the slice-capture tests, gradient_bench), plus every *_cuda_test Bazel defines (only the CUDA build
# runs those on a GPU) and //performer:cuda_kernel_sources, the .cu files Bazel never compiles. Their
# transitive workspace sources (.cc, .cu) must equal the .cc and .cu files the CMake file names
# outside its SLIMFIT_SERVICE block (which globs whole folders). Every .cu file in the tree must be
# in //performer:cuda_kernel_sources.
#
# Run from anywhere; needs Bazel (the workspace's, offline). Prints what differs, naming each file,
# and exits 1 when anything does; 0 and one line when the lists agree. scripts/test.sh runs it.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
cmake_file=scripts/cuda/CMakeLists.txt
bazel="${BAZEL:-bazel}"
work="$(mktemp -d "${TMPDIR:-/tmp}/slimfit-cuda-sources.XXXXXX")"
trap 'rm -rf "$work"' EXIT

query() { "$bazel" query --noshow_progress --output=label "$1" 2>"$work/query.err" || {
  cat "$work/query.err" >&2
  echo "check_sources: bazel query failed: $1" >&2
  exit 2
}; }

# The CMake side: the part before the service block, without comments or per-file properties.
sed '/^option(SLIMFIT_SERVICE/,$d; s/#.*//; /set_source_files_properties/d' "$cmake_file" >"$work/cmake_part"
{
  grep -oE '\$\{SRC\}/[A-Za-z0-9_./-]+\.(cc|cu)' "$work/cmake_part" | sed 's|^\${SRC}/||'
  sed -n '/^set(SLIMFIT_TESTS/,/^)/p' "$work/cmake_part" | grep -oE '[A-Za-z0-9_./-]+\.cc'
} | sort -u >"$work/cmake_sources"

# Programs CMake builds: its test list and the main sources of its other executables.
{
  sed -n '/^set(SLIMFIT_TESTS/,/^)/p' "$work/cmake_part" | grep -oE '[A-Za-z0-9_./-]+_test\.cc'
  grep -oE 'add_executable\([^)]*' "$work/cmake_part" | grep -oE '\$\{SRC\}/[A-Za-z0-9_./-]+\.cc' |
    sed 's|^\${SRC}/||'
} | sort -u >"$work/cmake_programs"

# Each as a Bazel source label (//pkg:file), then the tests and binaries that compile it.
program_labels=""
while read -r path; do
  [ -n "$path" ] || continue
  program_labels+=" //${path%/*}:${path##*/}"
done <"$work/cmake_programs"
missing_programs=""
for label in $program_labels; do
  if ! "$bazel" query --noshow_progress "$label" >/dev/null 2>&1; then
    missing_programs+="  ${label#//}"$'\n'
  fi
done
if [ -n "$missing_programs" ]; then
  echo "check_sources: $cmake_file builds programs from files no Bazel package has:" >&2
  printf '%s' "$missing_programs" | sed 's|:|/|' >&2
  exit 1
fi
roots="$(query "kind('cc_(test|binary)', rdeps(//..., set($program_labels), 1))" | tr '\n' ' ')"
cuda_tests="$(query "filter('_cuda_test\$', kind(cc_test, //...))" | tr '\n' ' ')"

# The Bazel side: workspace sources (not third_party, not external) of all of them.
query "kind('source file', deps(set($roots $cuda_tests //performer:cuda_kernel_sources)))" |
  grep -E '^//' | grep -vE '^//third_party[:/]' | grep -E '\.(cc|cu)$' |
  sed -E 's|^//||; s|:|/|' | sort -u >"$work/bazel_sources"

rc=0
missing="$(comm -23 "$work/bazel_sources" "$work/cmake_sources")"
extra="$(comm -13 "$work/bazel_sources" "$work/cmake_sources")"
if [ -n "$missing" ]; then
  echo "check_sources: in the Bazel targets the CUDA build mirrors but not in $cmake_file:" >&2
  sed 's/^/  /' <<<"$missing" >&2
  rc=1
fi
if [ -n "$extra" ]; then
  echo "check_sources: in $cmake_file but in none of the Bazel targets it mirrors:" >&2
  sed 's/^/  /' <<<"$extra" >&2
  rc=1
fi
git ls-files --cached --others --exclude-standard -- '*.cu' | sort -u >"$work/tree_cu"
grep -E '\.cu$' "$work/bazel_sources" >"$work/listed_cu" || true
unlisted="$(comm -23 "$work/tree_cu" "$work/listed_cu")"
if [ -n "$unlisted" ]; then
  echo "check_sources: .cu files missing from //performer:cuda_kernel_sources (performer/BUILD):" >&2
  sed 's/^/  /' <<<"$unlisted" >&2
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "check_sources: make $cmake_file and the Bazel targets agree (see the header of scripts/cuda/check_sources.sh)" >&2
  exit "$rc"
fi
echo "check_sources: $cmake_file compiles the $(wc -l <"$work/bazel_sources") sources of its $(wc -w <<<"$roots $cuda_tests") Bazel programs"

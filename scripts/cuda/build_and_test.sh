#!/usr/bin/env bash
# Builds the engine, its tests and gradient_bench against this machine's CUDA PyTorch
# (scripts/cuda/CMakeLists.txt), runs the tests, then the GPU benchmarks recorded in BENCHMARKS.md.
# Meant for a GPU machine with python3 + CUDA PyTorch, CMake, ninja and a C++17 compiler; what it
# lacks (Abseil, GoogleTest, nlohmann-json, zlib headers) comes from scripts/cuda/fetch_deps.sh,
# run beforehand on a Debian 12 machine and copied along as .cuda_deps/.
#
# Usage (from the repository root): scripts/cuda/build_and_test.sh OUT [STEPS]
#   OUT    folder for the logs: env.log build.log tests.log bench_config_a.jsonl bench_long_l.jsonl
#          bench_large.jsonl (build_without_kernels.log, build_without_graphs.log when the full build
#          failed)
#   STEPS  comma-separated, any of build,test,bench,bf16,ops,service (default: build,test,bench);
#          bf16 is the short comparison of bfloat16 products by hand, through autograd and float32
#          (bench_bf16.jsonl: config A, the large model, calibration's probe); ops counts LibTorch
#          calls per slice at config A (gradient_bench --count_ops: bench_ops.jsonl and
#          bench_ops_by_operator.txt); fused times the fused CUDA prefix-sum kernels against
#          LibTorch's ops (bench_fused.jsonl, bench_fused_ops_by_operator.txt); service (with
#          fetch_deps.sh --service) also builds the worker, the coordinator and the CLI and runs
#          scripts/cuda/service_job.sh on this machine's GPU (service.log, service_work.tar.gz)
#   TARGETS (environment) ninja targets the build step builds (default: all)
#   TESTS  (environment) a glob of test names to run (default: every *_test built); TESTS_APPEND=1
#          appends to tests.log instead of starting it afresh
# Environment: SLIMFIT_DEPS (default .cuda_deps/root), BUILD_DIR (default /tmp/slimfit-cuda-build),
#   PYTHON (default python3), DEVICE (default cuda:0).
# Exit status: non-zero when the build or a test failed; the benchmarks still run where they built.
set -uo pipefail
out="${1:?usage: scripts/cuda/build_and_test.sh OUT [STEPS]}"
steps="${2:-build,test,bench}"
deps="${SLIMFIT_DEPS:-$PWD/.cuda_deps/root}"
build="${BUILD_DIR:-/tmp/slimfit-cuda-build}"
py="${PYTHON:-python3}"
device="${DEVICE:-cuda:0}"
mkdir -p "$out"
status=0

torch_root="$($py -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
abi="$($py -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
cuda_include=""
for dir in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include; do
  if [ -f "$dir/cuda_runtime_api.h" ]; then cuda_include="$dir"; break; fi
done
if [ -z "$cuda_include" ]; then
  header="$(find "$(dirname "$torch_root")/nvidia" -name cuda_runtime_api.h 2>/dev/null | head -1)"
  [ -n "$header" ] && cuda_include="$(dirname "$header")"
fi

# nvcc, for the fused kernels (scripts/cuda/CMakeLists.txt builds without them when there is none).
nvcc=""
for candidate in "$(command -v nvcc 2>/dev/null)" "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" /usr/local/cuda/bin/nvcc \
    $(find "$(dirname "$torch_root")/nvidia" -path '*bin/nvcc' 2>/dev/null | head -1); do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then nvcc="$candidate"; break; fi
done

{
  date -u
  echo "nvcc: ${nvcc:-none} $([ -n "$nvcc" ] && "$nvcc" --version | tail -1)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
  echo "torch_root=$torch_root abi=$abi cuda_include=$cuda_include"
  c++ --version | head -1
  cmake --version | head -1
  echo "cores: $(nproc)"
} > "$out/env.log" 2>&1

if [[ ",$steps," == *",build,"* ]]; then
  # The C++ standard: 17 unless this LibTorch's headers need more.
  std=17
  printf '#include <ATen/ATen.h>\nint main() { return 0; }\n' > /tmp/slimfit_std_probe.cc
  if ! c++ -std=c++17 -fsyntax-only -isystem "$torch_root/include" \
      -isystem "$torch_root/include/torch/csrc/api/include" /tmp/slimfit_std_probe.cc \
      > /tmp/slimfit_std_probe.log 2>&1; then
    std=20
    echo "C++17 probe failed, using C++20: $(head -3 /tmp/slimfit_std_probe.log)" >> "$out/env.log"
  fi
  service=OFF
  [ -f "$deps/../gen/proto/slimfit.pb.cc" ] && service=ON
  # The card's compute capability (9.0 → 90) for the kernels; CMake's default list otherwise.
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')"
  [[ "$arch" =~ ^[0-9]+$ ]] || arch=""  # an old driver answers with an error message
  # $1: ON or OFF for the CUDA graphs and the direct CUDA runtime calls; $2 for slimfit's own kernels.
  configure_and_build() {
    # -U: a build folder reused from an earlier run must probe this machine's nvcc again.
    CUDACXX="${nvcc:-}" cmake -S scripts/cuda -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -UCMAKE_CUDA_COMPILER \
      -DSLIMFIT_TORCH_ROOT="$torch_root" -DSLIMFIT_CXX11_ABI="$abi" \
      -DSLIMFIT_CUDA_INCLUDE="$cuda_include" -DSLIMFIT_DEPS="$deps" -DSLIMFIT_CXX_STANDARD="$std" \
      -DSLIMFIT_SERVICE="$service" -DSLIMFIT_CUDA_GRAPHS="$1" -DSLIMFIT_LINK_CUDART="$1" \
      -DSLIMFIT_CUDA_KERNELS="$2" ${arch:+-DCMAKE_CUDA_ARCHITECTURES="$arch"} &&
      if [[ ",$steps," == *",service,"* ]]; then
        ninja -C "$build" -k 0 all service_slimfit_worker service_slimfit_coordinator service_slimfit
      else
        ninja -C "$build" -k 0 ${TARGETS:-}
      fi
  }
  # Binaries from an earlier run in a reused build folder must not stand in for this build's.
  rm -f "$build/gradient_bench" "$build"/*_test
  if ! configure_and_build ON ON > "$out/build.log" 2>&1; then
    status=1
    echo "build: FAILED (see build.log)"
    grep -m 20 -E "error|undefined reference" "$out/build.log"
    if [ ! -x "$build/gradient_bench" ]; then
      # The engine did not build: first without slimfit's own kernels (optional), then also without
      # CUDA graphs (every slice op by op) and direct CUDA runtime calls, so the rest stays measurable.
      echo "building without the fused kernels (build_without_kernels.log)"
      configure_and_build ON OFF > "$out/build_without_kernels.log" 2>&1
      if [ ! -x "$build/gradient_bench" ]; then
        echo "building without CUDA graphs (build_without_graphs.log)"
        configure_and_build OFF OFF > "$out/build_without_graphs.log" 2>&1 || echo "build: FAILED without CUDA graphs too"
      fi
    fi
  fi
  tail -5 "$out/build.log"
fi

if [[ ",$steps," == *",test,"* ]]; then
  [ -n "${TESTS_APPEND:-}" ] || : > "$out/tests.log"
  for test in "$build"/${TESTS:-*_test}; do
    [ -x "$test" ] || continue
    name="$(basename "$test")"
    start=$(date +%s)
    if timeout 300 "$test" --gtest_brief=1 >> "$out/tests.log" 2>&1; then
      echo "PASS $name ($(( $(date +%s) - start )) s)" | tee -a "$out/tests.log"
    else
      status=1
      echo "FAIL $name ($(( $(date +%s) - start )) s)" | tee -a "$out/tests.log"
    fi
  done
fi

if [[ ",$steps," == *",bench,"* ]] && [ -x "$build/gradient_bench" ]; then
  bench="$build/gradient_bench --device=$device --threads=4"
  # Config A of BENCHMARKS.md: L 4096, d_model 256, 2 layers, 4 heads, d_ff 1024; in one file, told
  # apart by their fields: slices replayed as CUDA graphs (auto, the default) and op by op; the
  # chunked prefix sums a group of blocks at a time (the default) and block by block (the form
  # before it); bfloat16 products (rel_discrepancy then against the float32 gradient).
  : > "$out/bench_config_a.jsonl"
  for variant in "--slice_replay=auto" "--slice_replay=off" "--slice_replay=auto --parallel_prefix=false" \
      "--slice_replay=off --parallel_prefix=false" "--slice_replay=auto --bf16_products"; do
    $bench --seq_len=4096 --slice=0,1024,512,256,128,64,32,16 --check_full --repeats=5 $variant \
      >> "$out/bench_config_a.jsonl" 2>&1 || status=1
  done
  # Long sequences: the sliced peak stays flat in L, full back-propagation's grows.
  : > "$out/bench_long_l.jsonl"
  for variant in "" "--bf16_products"; do
    $bench --seq_len=4096,16384,65536 --slice=0,1024,256 --repeats=2 $variant \
      >> "$out/bench_long_l.jsonl" 2>&1 || status=1
  done
  # A model the size a GPU is for: d_model 1024, 4 layers, 8 heads, d_ff 4096, L 16384.
  large="$bench --seq_len=16384 --d_model=1024 --layers=4 --heads=8 --d_ff=4096 --repeats=3"
  : > "$out/bench_large.jsonl"
  for variant in "--check_full" "--check_full --bf16_products" "--parallel_prefix=false"; do
    $large --slice=0,4096,1024,256,64 $variant >> "$out/bench_large.jsonl" 2>&1 || status=1
  done
  $large --slice=1024,256,64 --slice_replay=off >> "$out/bench_large.jsonl" 2>&1 || status=1
  echo "bench: $(cat "$out"/bench_*.jsonl | wc -l) lines"
fi
if [[ ",$steps," == *",bf16,"* ]] && [ -x "$build/gradient_bench" ]; then
  # bfloat16 products by hand (the default since engine revision 7) against through autograd and
  # against float32 by hand, two rounds alternating: config A, the large model, and calibration's
  # largest probe (d_model 512, 1,024 tokens; calibration fits the bfloat16 constants from all its
  # probes run both ways).
  bench="$build/gradient_bench --device=$device --threads=4"
  : > "$out/bench_bf16.jsonl"
  for round in 1 2; do
    for variant in "" "--bf16_products" "--bf16_products --explicit_backprop=false"; do
      $bench --seq_len=4096 --slice=0,1024,256,64,16 --repeats=5 $variant >> "$out/bench_bf16.jsonl" 2>&1 || status=1
      $bench --seq_len=16384 --d_model=1024 --layers=4 --heads=8 --d_ff=4096 --slice=0,4096,1024,256 --repeats=3 \
        $variant >> "$out/bench_bf16.jsonl" 2>&1 || status=1
      $bench --seq_len=1024 --d_model=512 --d_ff=2048 --slice=0 --repeats=5 $variant >> "$out/bench_bf16.jsonl" 2>&1 ||
        status=1
    done
  done
  echo "bf16: $(wc -l < "$out/bench_bf16.jsonl") lines"
fi
if [[ ",$steps," == *",ops,"* ]] && [ -x "$build/gradient_bench" ]; then
  # LibTorch calls per slice on the device (op by op: a replayed slice makes none), float32 and
  # bfloat16 products, config A: what fused per-slice kernels would have to replace.
  : > "$out/bench_ops.jsonl"
  : > "$out/bench_ops_by_operator.txt"
  for variant in "" "--bf16_products"; do
    "$build/gradient_bench" --device="$device" --threads=4 --seq_len=4096 --slice=0,256,64,16 --repeats=1 \
      --slice_replay=off --count_ops $variant >> "$out/bench_ops.jsonl" 2>> "$out/bench_ops_by_operator.txt" || status=1
  done
  echo "ops: $(wc -l < "$out/bench_ops.jsonl") lines"
fi
if [[ ",$steps," == *",fused,"* ]] && [ -x "$build/gradient_bench" ]; then
  # The fused prefix-sum kernels (performer/prefix_attention_cuda.h) against LibTorch's ops block by
  # block, config A, three rounds alternating, each against full back-propagation (--check_full):
  # replayed as CUDA graphs (the default) and op by op, float32 and float64; then the calls left.
  : > "$out/bench_fused.jsonl"
  for round in 1 2 3; do
    for fused in false true; do
      for variant in "" "--slice_replay=off" "--dtype=float64"; do
        "$build/gradient_bench" --device="$device" --threads=4 --seq_len=4096 --slice=0,128,64,32,16 --repeats=5 \
          --check_full --fused_cuda_kernels=$fused $variant >> "$out/bench_fused.jsonl" 2>&1 || status=1
      done
    done
  done
  "$build/gradient_bench" --device="$device" --threads=4 --seq_len=4096 --slice=64,16 --repeats=1 \
    --slice_replay=off --count_ops --fused_cuda_kernels=true >> "$out/bench_fused.jsonl" \
    2>> "$out/bench_fused_ops_by_operator.txt" || status=1
  echo "fused: $(wc -l < "$out/bench_fused.jsonl") lines"
fi
if [[ ",$steps," == *",service,"* ]]; then
  if [ -x "$build/bin/worker/slimfit-worker" ]; then
    DEVICE="$device" timeout 300 scripts/cuda/service_job.sh "$build/bin" "$out" > "$out/service.log" 2>&1 ||
      { status=1; echo "service job: FAILED (see service.log)"; }
    tail -25 "$out/service.log"
  else
    status=1
    echo "service: the binaries did not build (see build.log)"
  fi
fi
exit $status

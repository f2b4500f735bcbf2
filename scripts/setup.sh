#!/usr/bin/env bash
# Installs every Debian package slimfit needs to build, test and run (clang-14, its sanitizer and
# libFuzzer runtimes and llvm-symbolizer are for the fuzz targets, scripts/fuzz.sh; chromium, with a
# font to draw text, and python3-prometheus-client are for the tests of the status page and the
# metrics endpoint; procps gives the scripts pkill; clang-format is for scripts/check_format.sh).
# Idempotent: when everything is already installed it only checks (a second or two) and touches
# nothing.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java
  g++ pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libabsl-dev
  libtorch-dev libopenblas0-pthread libdnnl-dev
  libgtest-dev libgmock-dev
  nlohmann-json3-dev libsqlite3-dev libtomlplusplus-dev
  libcpp-httplib-dev libsystemd-dev
  python3-torch python3-prometheus-client
  systemd procps
  chromium fonts-dejavu-core
  clang-14 libclang-rt-14-dev llvm-14 clang-format libtsan2
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"

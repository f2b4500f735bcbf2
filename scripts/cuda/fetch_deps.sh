#!/usr/bin/env bash
# Gathers, on a Debian 12 machine, what the CUDA build (scripts/cuda/CMakeLists.txt) needs beside
# a CUDA LibTorch and a compiler, for a GPU machine without network or Debian packages:
#   engine:   Abseil (headers and shared libraries), GoogleTest and GoogleMock (headers and static
#             libraries), nlohmann-json, zlib's headers;
#   service:  (--service) also gRPC, Protocol Buffers, OpenSSL, SQLite, toml++, cpp-httplib,
#             brotli and libsystemd (headers and shared libraries), and the C++ code protoc
#             generates from proto/*.proto, so the worker, the coordinator and the CLI build too.
# Packages are downloaded with apt-get download and unpacked with dpkg -x into DEST (default
# .cuda_deps, which git ignores); nothing is installed. Run from the repository root.
#
# Usage: scripts/cuda/fetch_deps.sh [--service] [DEST]
set -euo pipefail
service=0
if [ "${1:-}" = "--service" ]; then service=1; shift; fi
dest="${1:-.cuda_deps}"
packages=(libabsl-dev libabsl20220623 libgtest-dev libgmock-dev googletest nlohmann-json3-dev zlib1g-dev)
if [ "$service" = 1 ]; then
  packages+=(libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 libprotobuf-dev libprotobuf32
             libre2-9 libc-ares2 libssl-dev libssl3 libsqlite3-dev libsqlite3-0
             libtomlplusplus-dev libtomlplusplus3 libcpp-httplib-dev libcpp-httplib0.11
             libbrotli-dev libbrotli1 libsystemd-dev libsystemd0)
  command -v protoc >/dev/null && [ -x /usr/bin/grpc_cpp_plugin ] ||
    { echo "fetch_deps: --service needs protoc and grpc_cpp_plugin (scripts/setup.sh installs them)" >&2; exit 1; }
fi
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/root"
(cd "$dest/debs" && apt-get download "${packages[@]}")
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/root"; done
# What the build does not read: documentation, sources, static copies of the shared libraries.
rm -rf "$dest/debs" "$dest/root/usr/share/doc" "$dest/root/usr/src" "$dest/root/usr/share/man"
find "$dest/root" \( -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' \) -delete
find "$dest/root" -name 'libprotoc*' -delete
# Debian puts some libraries in /lib/x86_64-linux-gnu: one folder for the build.
if [ -d "$dest/root/lib/x86_64-linux-gnu" ]; then
  mkdir -p "$dest/root/usr/lib/x86_64-linux-gnu"
  cp -a "$dest/root/lib/x86_64-linux-gnu/." "$dest/root/usr/lib/x86_64-linux-gnu/"
  rm -rf "$dest/root/lib"
fi
if [ "$service" = 1 ]; then
  mkdir -p "$dest/gen"
  protoc --proto_path=. --proto_path=/usr/include --cpp_out="$dest/gen" --grpc_out="$dest/gen" \
    --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin proto/*.proto
fi
echo "fetch_deps: unpacked ${#packages[@]} packages into $dest ($(du -sh "$dest" | cut -f1))"

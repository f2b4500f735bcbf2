"""Compiler options for source files that use gRPC and the service protos (//proto:service_precompiled).

SERVICE_COPTS makes a target's files start with the precompiled <grpcpp/grpcpp.h> and
"proto/slimfit.grpc.pb.h" (~3 s of parsing; the target must depend on //proto:service_precompiled).
Use it on targets whose files include the service protos or gRPC and not LibTorch (a file takes
one precompiled header: LibTorch's, TORCH_COPTS, saves more).
"""

load("//third_party:precompiled_header.bzl", "precompiled_header_copts", "precompiled_header_key")

# What //proto:service_precompiled precompiles.
SERVICE_PRECOMPILED_INCLUDES = [
    "<grpcpp/grpcpp.h>",
    "\"proto/slimfit.grpc.pb.h\"",
]

# On every dependent's command line and the precompiled file's (precompiled_header_key).
SERVICE_PRECOMPILED_KEY = precompiled_header_key(
    "SLIMFIT_SERVICE_PRECOMPILED",
    SERVICE_PRECOMPILED_INCLUDES,
)

# gcc only: clang records the generated proto headers' sandbox paths (precompiled_header.bzl).
SERVICE_COPTS = precompiled_header_copts(
    "proto/service_precompiled.h",
    SERVICE_PRECOMPILED_KEY,
    clang = False,
)

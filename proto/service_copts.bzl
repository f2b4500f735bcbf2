"""Compiler options for source files that use gRPC (//proto:service_precompiled).

SERVICE_COPTS makes a target's files start with the precompiled <grpcpp/grpcpp.h> (the target must
depend on //proto:service_precompiled). Use it on targets whose files include gRPC or the service
protos and not LibTorch (a file takes one precompiled header: LibTorch's, TORCH_COPTS, saves more).
The generated proto headers are not precompiled: they change with the .proto files, and a
precompiled copy would leave dependents compiled against the old ones (precompiled_header.bzl).
"""

load("//third_party:precompiled_header.bzl", "precompiled_header_copts", "precompiled_header_key")

# What //proto:service_precompiled precompiles.
SERVICE_PRECOMPILED_INCLUDES = [
    "<grpcpp/grpcpp.h>",
]

# On every dependent's command line and the precompiled file's (precompiled_header_key).
SERVICE_PRECOMPILED_KEY = precompiled_header_key(
    "SLIMFIT_SERVICE_PRECOMPILED",
    SERVICE_PRECOMPILED_INCLUDES,
)

# gcc only (when it held the generated proto headers, clang recorded their sandbox paths; gRPC's
# alone were not measured under clang).
SERVICE_COPTS = precompiled_header_copts(
    "proto/service_precompiled.h",
    SERVICE_PRECOMPILED_KEY,
    clang = False,
)

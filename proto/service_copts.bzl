"""Compiler options for source files that use gRPC and the service protos (//proto:service_precompiled).

SERVICE_COPTS makes a target's files start with the precompiled <grpcpp/grpcpp.h> and
"proto/slimfit.grpc.pb.h" (with the protos it imports and protobuf's headers: ~3 s of parsing per
file; the target must depend on //proto:service_precompiled). Use it on targets whose files include
the service protos or gRPC and not LibTorch (a file takes one precompiled header: LibTorch's,
TORCH_COPTS, saves more). When a .proto file changes, the precompiled file is built again and its
digest header makes every dependent recompile (third_party/precompiled_header.bzl).
"""

load("//third_party:precompiled_header.bzl", "precompiled_header_copts")
load("//third_party:test_copts.bzl", "GTEST_PRECOMPILED_INCLUDES")

# What //proto:service_precompiled precompiles.
SERVICE_PRECOMPILED_INCLUDES = [
    "<grpcpp/grpcpp.h>",
    "\"proto/slimfit.grpc.pb.h\"",
]

# gcc only: clang records the generated proto headers' sandbox paths (precompiled_header.bzl).
SERVICE_COPTS = precompiled_header_copts("proto/service_precompiled.h", clang = False)

# What //proto:service_test_precompiled precompiles: the above with GoogleTest and GoogleMock.
SERVICE_TEST_PRECOMPILED_INCLUDES = SERVICE_PRECOMPILED_INCLUDES + GTEST_PRECOMPILED_INCLUDES

# For test files (third_party/test_copts.bzl), with a dep on //proto:service_test_precompiled.
SERVICE_TEST_COPTS = precompiled_header_copts("proto/service_test_precompiled.h", clang = False)

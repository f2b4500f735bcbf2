"""Compiler options for test sources: GoogleTest and GoogleMock precompiled with the rest.

Parsing <gmock/gmock.h> and <gtest/gtest.h> takes ~2 s of every test file's compile on the 2-core CI
machine, ~145 files in //.... A file takes one precompiled header, so each kind of test file has its
own that adds them (third_party/precompiled_header.bzl): put on a cc_test, instead of TORCH_COPTS,
SERVICE_COPTS or nothing,

  TORCH_TEST_COPTS    files that include <ATen/ATen.h> (//third_party:torch_test_precompiled)
  SERVICE_TEST_COPTS  files that use gRPC or the service protos and not LibTorch (proto/service_copts.bzl,
                      with a dep on //proto:service_test_precompiled)
  TEST_COPTS          every other test file (//third_party:test_precompiled)

//third_party:gtest and :gtest_main bring the torch and plain test precompiled headers in optimised
builds (every test depends on one of them). Test support libraries keep their ordinary copts.
"""

load(":precompiled_header.bzl", "precompiled_header_copts")

# What every test precompiled header adds to its kind's includes.
GTEST_PRECOMPILED_INCLUDES = [
    "<gmock/gmock.h>",
    "<gtest/gtest.h>",
]

TEST_COPTS = precompiled_header_copts("third_party/test_precompiled.h")

TORCH_TEST_COPTS = precompiled_header_copts("third_party/torch_test_precompiled.h")

"""Compiler options for source files that use LibTorch (see //third_party:torch_precompiled).

TORCH_COPTS makes a target's files start with the precompiled <ATen/ATen.h> in optimised builds
(the target must depend on //third_party:torch, directly or through its deps). Use it on targets
whose files include <ATen/ATen.h>, directly or through the project's headers; on others it only
costs the ~1.5 s load. Not on targets whose own copts change the language (e.g. -fno-math-errno):
gcc then parses the header instead and says so (-Winvalid-pch: correct, only slower); clang
refuses the compile.
"""
load(":precompiled_header.bzl", "precompiled_header_copts")

# What //third_party:torch_precompiled precompiles.
TORCH_PRECOMPILED_INCLUDES = ["<ATen/ATen.h>"]

TORCH_COPTS = precompiled_header_copts("third_party/torch_precompiled.h")

"""A rule that adds absolute system include directories (as -isystem) to every dependent.

cc_library's `includes` only takes package-relative paths and its `copts` do not propagate, so the
LibTorch C++ API directory (/usr/include/torch/csrc/api/include) is exported through CcInfo here.
"""

def _system_includes_impl(ctx):
    return [CcInfo(compilation_context = cc_common.create_compilation_context(
        system_includes = depset(ctx.attr.dirs),
    ))]

system_includes = rule(
    implementation = _system_includes_impl,
    attrs = {"dirs": attr.string_list(mandatory = True)},
    provides = [CcInfo],
)

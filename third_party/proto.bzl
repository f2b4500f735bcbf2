"""cc_grpc_proto: C++ protobuf + gRPC code generation with the system protoc (offline).

Bazel's native cc_proto_library needs @com_google_protobuf, which cannot be fetched here, so this
macro runs Debian's /usr/bin/protoc with /usr/bin/grpc_cpp_plugin in a genrule and wraps the
generated files in a cc_library.

Example, in proto/BUILD:

    load("//third_party:proto.bzl", "cc_grpc_proto")

    cc_grpc_proto(
        name = "x_proto",
        src = "x.proto",
    )

then depend on "//proto:x_proto" and write

    #include "proto/x.pb.h"       // messages
    #include "proto/x.grpc.pb.h"  // services (stubs, Service base classes)

Import paths are relative to the workspace root: in another .proto, `import "proto/x.proto";`
(then list "//proto:x_proto" in that target's proto_deps). Well-known types
(`import "google/protobuf/timestamp.proto";` etc.) come from /usr/include.
"""

PROTOC = "/usr/bin/protoc"
GRPC_CPP_PLUGIN = "/usr/bin/grpc_cpp_plugin"

def _strip_proto(src):
    if not src.endswith(".proto"):
        fail("cc_grpc_proto: src must be a .proto file, got %r" % src)
    return src[:-len(".proto")]

def _protos_label(dep):
    """Label of the filegroup holding a cc_grpc_proto target's .proto files."""
    if ":" not in dep:
        fail("cc_grpc_proto: write proto_deps as full labels ('//pkg:name' or ':name'), got %r" % dep)
    return dep + "_protos"

def cc_grpc_proto(
        name,
        src,
        deps = [],
        proto_deps = [],
        mocks = False,
        visibility = None,
        testonly = None,
        **kwargs):
    """Generates <src>.pb.{h,cc} and <src>.grpc.pb.{h,cc} and a cc_library `name` over them.

    Args:
      name: name of the cc_library (link against it, include "<package>/<base>.pb.h").
      src: the .proto file, relative to this package (e.g. "x.proto").
      deps: extra cc deps of the generated library (//third_party:grpc is always added).
      proto_deps: other cc_grpc_proto targets whose .proto files `src` imports.
      mocks: also generate <base>_mock.grpc.pb.h (gMock stubs; the target then needs
        //third_party:gtest where it is used).
      visibility: visibility of the cc_library and the .proto filegroup.
      testonly: passed through.
      **kwargs: passed to the cc_library.
    """
    base = _strip_proto(src)
    outs = [
        base + ".pb.h",
        base + ".pb.cc",
        base + ".grpc.pb.h",
        base + ".grpc.pb.cc",
    ]
    if mocks:
        outs.append(base + "_mock.grpc.pb.h")
    dep_protos = [_protos_label(d) for d in proto_deps]

    # The .proto files of this target and (transitively) of its proto_deps, for importers.
    native.filegroup(
        name = name + "_protos",
        srcs = [src] + dep_protos,
        visibility = visibility,
        testonly = testonly,
    )

    # protoc runs from the execroot with -I. so that every file is known by its workspace-relative
    # path ("pkg/x.proto"); outputs for "pkg/x.proto" therefore land in $(GENDIR)/pkg/, which is
    # this rule's $(RULEDIR), and the generated code includes "pkg/x.pb.h".
    native.genrule(
        name = name + "_gen",
        srcs = [src] + dep_protos,
        outs = outs,
        cmd = " ".join([
            PROTOC,
            "--proto_path=.",
            "--proto_path=/usr/include",
            "--cpp_out=$(GENDIR)",
            "--grpc_out=" + ("generate_mock_code=true:" if mocks else "") + "$(GENDIR)",
            "--plugin=protoc-gen-grpc=" + GRPC_CPP_PLUGIN,
            "$(location %s)" % src,
        ]),
        message = "Generating C++ protobuf/gRPC code for %s" % src,
        visibility = ["//visibility:private"],
        testonly = testonly,
    )

    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc", base + ".grpc.pb.cc"],
        hdrs = [h for h in outs if h.endswith(".h")],
        deps = depset(list(deps) + list(proto_deps) + ["//third_party:grpc"]).to_list(),
        visibility = visibility,
        testonly = testonly,
        **kwargs
    )

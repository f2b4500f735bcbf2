"""slimfit_fuzz_target: one libFuzzer target and the regression test over its corpus.

    slimfit_fuzz_target(
        name = "safetensors",          # the decoder's name; the corpus is corpus/safetensors/
        srcs = ["safetensors_fuzzer.cc"],
        deps = ["//performer:safetensors"],
    )

defines
  :safetensors_fuzz_target   the target's code (LLVMFuzzerTestOneInput), a cc_library;
  :safetensors_fuzzer        the fuzzer binary (tags "manual", "fuzzer": not built by //...). Built
                             with --config=fuzz it links libFuzzer's main (scripts/fuzz.sh runs it);
                             otherwise corpus_replay_main.cc, so it still builds with gcc;
  :safetensors_corpus_test   a cc_test that runs every file of corpus/safetensors/ through the target
                             once: under gcc in the ordinary `bazel test //...`, under ASan with
                             `bazel test --config=fuzz //fuzz:all`.
copts are the target code's compiler options (e.g. TORCH_COPTS for code that includes LibTorch).
"""

def slimfit_fuzz_target(name, srcs, deps, data = [], copts = [], size = "small"):
    library = name + "_fuzz_target"
    corpus = "corpus/" + name
    native.cc_library(
        name = library,
        testonly = 1,
        srcs = srcs,
        copts = copts,
        data = data,
        # LLVMFuzzerTestOneInput is only referenced from the main() linked beside it.
        alwayslink = 1,
        deps = deps + ["//fuzz:fuzz_support"],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = 1,
        deps = [":" + library] + select({
            "//fuzz:libfuzzer": [],
            "//conditions:default": ["//fuzz:corpus_replay_main"],
        }),
        linkopts = select({
            "//fuzz:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        tags = ["manual", "fuzzer"],
    )
    native.cc_test(
        name = name + "_corpus_test",
        size = size,
        args = [native.package_name() + "/" + corpus],
        data = native.glob([corpus + "/**"], allow_empty = False),
        deps = [
            ":" + library,
            "//fuzz:corpus_replay_main",
        ],
    )

// compare_models: how far one exported model is from another (bench/model_distance.h).
//
//   compare_models GOT.safetensors REFERENCE.safetensors [--tolerance=1e-5] [--json]
//
// Prints the relative L2 distance over all parameters, the worst tensor, the largest element
// difference and whether the files are bit-identical. Exit status 0 when the distance is at most
// --tolerance, 1 when above it, 2 for a usage error or an unreadable or mismatched file (one line
// "compare_models: <message>" on stderr).
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/exit_status.h"
#include "base/flags.h"
#include "bench/model_distance.h"

namespace {

constexpr char kProgram[] = "compare_models";

struct Options {
  std::string got;
  std::string reference;
  double tolerance = 1e-5;
  bool json = false;
};

void PrintJson(const slimfit::bench::ModelDistance& distance, const Options& options, bool within) {
  nlohmann::json out = {{"got", options.got},
                        {"reference", options.reference},
                        {"elements", distance.elements},
                        {"tensors", distance.tensors.size()},
                        {"relative_l2", distance.relative_l2},
                        {"worst_tensor", distance.worst_tensor},
                        {"worst_relative_l2", distance.worst_relative_l2},
                        {"max_abs_difference", distance.max_abs_difference},
                        {"bit_identical", distance.bit_identical},
                        {"tolerance", options.tolerance},
                        {"within_tolerance", within}};
  std::cout << out.dump() << "\n";
}

void PrintText(const slimfit::bench::ModelDistance& distance, const Options& options, bool within) {
  int differing = 0;
  for (const auto& tensor : distance.tensors) differing += tensor.bit_identical ? 0 : 1;
  std::cout << absl::StrFormat(
                   "relative L2 distance %.3e over %d parameters in %d tensors (tolerance %.1e: %s)\n",
                   distance.relative_l2, distance.elements, distance.tensors.size(), options.tolerance,
                   within ? "within" : "ABOVE")
            << absl::StrFormat("worst tensor %s: %.3e relative; largest element difference %.3e\n",
                               distance.worst_tensor, distance.worst_relative_l2, distance.max_abs_difference)
            << (distance.bit_identical ? std::string("bit-identical: yes\n")
                                       : absl::StrFormat("bit-identical: no (%d of %d tensors differ)\n",
                                                         differing, distance.tensors.size()));
}

int Run(const std::vector<std::string>& args) {
  Options options;
  slimfit::base::FlagSet flags(kProgram, "compare_models GOT.safetensors REFERENCE.safetensors [flags]",
                               "Relative L2 distance of two models over all their parameters.");
  flags.SetInvocation(kProgram);
  flags.Positional("GOT.safetensors", &options.got, "the model to check", slimfit::base::FlagSet::kRequired);
  flags.Positional("REFERENCE.safetensors", &options.reference, "the model it is compared with",
                   slimfit::base::FlagSet::kRequired);
  flags.Double("tolerance", &options.tolerance, "largest relative L2 distance accepted (exit status 0)");
  flags.Bool("json", &options.json, "one JSON object instead of text");
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::cerr << slimfit::base::FormatErrorLine(kProgram, parsed.message());
    return slimfit::base::kExitUsage;
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return slimfit::base::kExitOk;
  }
  absl::StatusOr<slimfit::bench::ModelDistance> distance =
      slimfit::bench::CompareModelFiles(options.got, options.reference);
  if (!distance.ok()) {
    std::cerr << slimfit::base::FormatErrorLine(kProgram, distance.status().message());
    return slimfit::base::kExitUsage;
  }
  const bool within = distance->relative_l2 <= options.tolerance;
  if (options.json) {
    PrintJson(*distance, options, within);
  } else {
    PrintText(*distance, options, within);
  }
  return within ? slimfit::base::kExitOk : slimfit::base::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) { return Run(std::vector<std::string>(argv + 1, argv + argc)); }

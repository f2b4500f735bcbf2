// Which of a model's parameters a job trains (JobSpec.trainable): comma-separated patterns over
// parameter names, '*' matching any run of characters (none included), everything else literally.
// "layers.1.*,output_logit_map.*" selects the second layer and the output map.
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PERFORMER_PARAMETER_SELECTION_H_
#define SLIMFIT_PERFORMER_PARAMETER_SELECTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer {

// Whether `name` matches `pattern` as a whole ('*': any run of characters).
bool MatchesPattern(absl::string_view pattern, absl::string_view name);

// Indices (increasing) of the names matching any of `patterns`; every index when `patterns` is
// empty. INVALID_ARGUMENT naming `field` for an empty pattern ("a,,b") or one that matches no
// name ("spec.trainable: 'layers.9.*' matches no parameter; the model's are embedding, ...").
absl::StatusOr<std::vector<int>> SelectParameters(const std::vector<std::string>& names,
                                                  absl::string_view patterns,
                                                  absl::string_view field = "spec.trainable");

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_PARAMETER_SELECTION_H_

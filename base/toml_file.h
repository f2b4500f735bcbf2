// Reads a flat TOML file (toml++, Debian's libtomlplusplus) as key/value text: what a daemon's
// `--config FILE` holds (base/flags.h, FlagSet::ConfigFile). Keys are at the top level; values are
// strings, integers, floats, booleans, or arrays of strings (joined with commas, as a repeatable
// list flag takes them).
//
//   # /etc/slimfit/coordinator.toml
//   listen = "0.0.0.0:50051"
//   state_dir = "/var/lib/slimfit"
//   lost_after_ms = 5000
//   insecure = false
//
// Errors: NOT_FOUND / PERMISSION_DENIED for an unreadable file; INVALID_ARGUMENT
// "FILE:LINE:COLUMN: <what>" for a syntax error, "FILE: <key>: <why>" for a table, a date or a
// mixed array.
//
// Thread safety: a pure function.
#ifndef SLIMFIT_BASE_TOML_FILE_H_
#define SLIMFIT_BASE_TOML_FILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace slimfit::base {

// The file's keys in file order, each with its value as flag text (integers in decimal, floats in
// the shortest form that reads back equal, booleans as true/false).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadFlatToml(const std::string& path);

}  // namespace slimfit::base

#endif  // SLIMFIT_BASE_TOML_FILE_H_

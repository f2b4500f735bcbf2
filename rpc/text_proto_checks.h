// Checks on messages read from text files before they are sent on (job specs, device profiles):
// what TextFormat accepts but the receiver refuses, or cannot be printed and read back the same.
// - UTF-8: TextFormat takes any bytes into a `string` field (through octal and hex escapes), but
//   proto3's binary parser refuses a `string` field that is not valid UTF-8, so the receiver
//   cannot parse the message (and protobuf logs an error line while serialising it).
// - Finite numbers: TextFormat reads "nan", "-nan", "inf" into `float`/`double` fields. No setting
//   of ours means NaN or infinity, and NaN's sign is lost when the value is printed again ("nan"),
//   so such a file is refused where it is read, naming the field, instead of far from its source.
//
// Example:
//   if (std::optional<std::string> field = rpc::FirstNonUtf8Field(spec); field.has_value()) {
//     return absl::InvalidArgumentError(absl::StrCat(path, ": ", *field, " is not valid UTF-8"));
//   }
//
// Thread safety: pure functions.
#ifndef SLIMFIT_RPC_TEXT_PROTO_CHECKS_H_
#define SLIMFIT_RPC_TEXT_PROTO_CHECKS_H_

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace slimfit::rpc {

// True when `bytes` is well-formed UTF-8 (RFC 3629: shortest forms only, no surrogates, nothing
// above U+10FFFF).
bool IsValidUtf8(absl::string_view bytes);

// The path of the first `string` field (not `bytes`) of `message`, its sub-messages, repeated and
// map fields, in field-number order, whose value is not valid UTF-8: "name", "dataset_ids[2]",
// "model.checkpoint.upload_id". nullopt when every one is valid.
std::optional<std::string> FirstNonUtf8Field(const google::protobuf::Message& message);

// The path of the first `float` or `double` field, searched as above, whose value is NaN or
// infinite; nullopt when every one is finite.
std::optional<std::string> FirstNonFiniteField(const google::protobuf::Message& message);

}  // namespace slimfit::rpc

#endif  // SLIMFIT_RPC_TEXT_PROTO_CHECKS_H_

// UTF-8 in the `string` fields of messages read from text. TextFormat takes any bytes into a
// `string` field (through octal and hex escapes), but proto3's binary parser refuses a `string`
// field that is not valid UTF-8: a message read from a text file and sent as is cannot be parsed by
// its receiver (and protobuf logs an error line while serialising it). Readers of text protos that
// are sent on (job specs, device profiles) check them with FirstNonUtf8Field.
//
// Example:
//   if (std::optional<std::string> field = rpc::FirstNonUtf8Field(spec); field.has_value()) {
//     return absl::InvalidArgumentError(absl::StrCat(path, ": ", *field, " is not valid UTF-8"));
//   }
//
// Thread safety: pure functions.
#ifndef SLIMFIT_PROTO_UTF8_FIELDS_H_
#define SLIMFIT_PROTO_UTF8_FIELDS_H_

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

}  // namespace slimfit::rpc

#endif  // SLIMFIT_PROTO_UTF8_FIELDS_H_

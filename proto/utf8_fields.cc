#include "proto/utf8_fields.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::rpc {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::optional<std::string> FirstNonUtf8FieldIn(const Message& message, const std::string& prefix) {
  const Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);  // set fields, by number
  for (const FieldDescriptor* field : fields) {
    const std::string path = absl::StrCat(prefix, field->name());
    const bool is_string = field->type() == FieldDescriptor::TYPE_STRING;
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!is_string && !is_message) continue;
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string item = field->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      if (is_string) {
        std::string scratch;
        const std::string& value = field->is_repeated()
                                       ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                                       : reflection->GetStringReference(message, field, &scratch);
        if (!IsValidUtf8(value)) return item;
      } else {
        const Message& child = field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                                    : reflection->GetMessage(message, field);
        if (std::optional<std::string> found = FirstNonUtf8FieldIn(child, item + "."); found.has_value()) {
          return found;
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace

bool IsValidUtf8(absl::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    int length;
    uint32_t code;
    uint32_t least;  // the smallest code point that needs `length` bytes
    if ((lead & 0xe0) == 0xc0) {
      length = 2, code = lead & 0x1f, least = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      length = 3, code = lead & 0x0f, least = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      length = 4, code = lead & 0x07, least = 0x10000;
    } else {
      return false;  // a continuation byte, or 0xf8..0xff
    }
    if (bytes.size() - i < static_cast<size_t>(length)) return false;
    for (int k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(bytes[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < least || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

std::optional<std::string> FirstNonUtf8Field(const Message& message) { return FirstNonUtf8FieldIn(message, ""); }

}  // namespace slimfit::rpc

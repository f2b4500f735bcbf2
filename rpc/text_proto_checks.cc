#include "rpc/text_proto_checks.h"

#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"

namespace slimfit::rpc {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Whether the value at `index` of a repeated field (or the singular field, index -1) is bad.
using IsBadValue = std::function<bool(const Message&, const FieldDescriptor*, int index)>;

// The path of the first value of a field for which `applies` holds and `is_bad` says so, searching
// set fields by number and descending into sub-messages (repeated and map fields included).
std::optional<std::string> FirstBadField(const Message& message, const std::string& prefix,
                                         const std::function<bool(const FieldDescriptor*)>& applies,
                                         const IsBadValue& is_bad) {
  const Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);  // set fields, by number
  for (const FieldDescriptor* field : fields) {
    const std::string path = absl::StrCat(prefix, field->name());
    const bool checked = applies(field);
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!checked && !is_message) continue;
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string item = field->is_repeated() ? absl::StrCat(path, "[", i, "]") : path;
      const int index = field->is_repeated() ? i : -1;
      if (checked) {
        if (is_bad(message, field, index)) return item;
      } else {
        const Message& child = field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                                    : reflection->GetMessage(message, field);
        if (std::optional<std::string> found = FirstBadField(child, item + ".", applies, is_bad);
            found.has_value()) {
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

std::optional<std::string> FirstNonUtf8Field(const Message& message) {
  return FirstBadField(
      message, "", [](const FieldDescriptor* field) { return field->type() == FieldDescriptor::TYPE_STRING; },
      [](const Message& m, const FieldDescriptor* field, int index) {
        const Reflection* reflection = m.GetReflection();
        std::string scratch;
        const std::string& value = index >= 0
                                       ? reflection->GetRepeatedStringReference(m, field, index, &scratch)
                                       : reflection->GetStringReference(m, field, &scratch);
        return !IsValidUtf8(value);
      });
}

std::optional<std::string> FirstNonFiniteField(const Message& message) {
  return FirstBadField(
      message, "",
      [](const FieldDescriptor* field) {
        return field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE ||
               field->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT;
      },
      [](const Message& m, const FieldDescriptor* field, int index) {
        const Reflection* reflection = m.GetReflection();
        const bool is_double = field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE;
        const double value =
            index >= 0 ? (is_double ? reflection->GetRepeatedDouble(m, field, index)
                                    : static_cast<double>(reflection->GetRepeatedFloat(m, field, index)))
                       : (is_double ? reflection->GetDouble(m, field)
                                    : static_cast<double>(reflection->GetFloat(m, field)));
        return !std::isfinite(value);
      });
}

}  // namespace slimfit::rpc

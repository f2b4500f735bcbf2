// The safetensors writer: a deterministic header, tensor bytes streamed into an atomically
// replaced file.
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "performer/safetensors.h"
#include "performer/safetensors_format.h"

namespace slimfit::performer {
namespace {

using namespace safetensors_internal;  // NOLINT: the format's own helpers

// What a safetensors file consists of: the length prefix and padded header,
// followed by the bytes of `tensors` in order.
struct Encoding {
  std::string head;
  std::vector<at::Tensor> tensors;  // contiguous, on CPU
  uint64_t data_bytes = 0;
};

absl::Status CheckUtf8(const std::string& s, absl::string_view what) {
  try {
    (void)Json(s).dump();
  } catch (const Json::type_error&) {
    return Invalid(what, " is not valid UTF-8");
  }
  return absl::OkStatus();
}

absl::StatusOr<Encoding> Encode(const TensorFile& file) {
  OrderedJson header = OrderedJson::object();
  if (!file.metadata.empty()) {
    OrderedJson& metadata = header[kMetadataKey] = OrderedJson::object();
    for (const auto& [key, value] : file.metadata) {
      absl::Status utf8 = CheckUtf8(key, absl::StrCat("metadata key '", key, "'"));
      if (utf8.ok()) {
        utf8 = CheckUtf8(value, absl::StrCat("metadata value of key '", key, "'"));
      }
      if (!utf8.ok()) return utf8;
      metadata[key] = value;
    }
  }
  Encoding encoding;
  for (const auto& [name, tensor] : file.tensors) {
    if (name == kMetadataKey) {
      return Invalid("a tensor cannot be named \"", kMetadataKey, "\"");
    }
    absl::Status utf8 = CheckUtf8(name, absl::StrCat("tensor name '", name, "'"));
    if (!utf8.ok()) return utf8;
    if (!tensor.defined()) return Invalid("tensor '", name, "' is undefined");
    if (tensor.layout() != at::kStrided) {
      return Invalid("tensor '", name, "' has layout ", c10::str(tensor.layout()),
                     "; only dense (strided) tensors can be saved");
    }
    const char* dtype = NameOfDtype(tensor.scalar_type());
    if (dtype == nullptr) {
      return Invalid("tensor '", name, "' has dtype ", c10::toString(tensor.scalar_type()),
                     ", which cannot be saved (supported: ", SupportedDtypes(), ")");
    }
    at::Tensor cpu;
    try {
      // resolve_neg: a lazily negated view must be saved with its values.
      cpu = tensor.to(at::kCPU).resolve_neg().contiguous();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("cannot copy tensor '", name,
                                              "' to contiguous CPU memory: ", e.what_without_backtrace()));
    }
    const uint64_t bytes = cpu.nbytes();
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = dtype;
    entry["shape"] = cpu.sizes().vec();
    entry["data_offsets"] = OrderedJson::array({encoding.data_bytes, encoding.data_bytes + bytes});
    header[name] = std::move(entry);
    encoding.data_bytes += bytes;
    encoding.tensors.push_back(std::move(cpu));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxHeaderBytes) {
    return Invalid("header would be ", text.size(), " bytes, above the limit of ", kMaxHeaderBytes,
                   " that readers accept (too many tensors?)");
  }
  encoding.head.reserve(kPrefixBytes + text.size());
  for (int i = 0; i < 8; ++i) {
    encoding.head.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  }
  encoding.head += text;
  return encoding;
}

const char* TensorBytes(const at::Tensor& tensor) { return static_cast<const char*>(tensor.data_ptr()); }

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(const TensorFile& file) {
  absl::StatusOr<Encoding> encoding = Encode(file);
  if (!encoding.ok()) return encoding.status();
  std::string out;
  out.reserve(encoding->head.size() + encoding->data_bytes);
  out += encoding->head;
  for (const at::Tensor& tensor : encoding->tensors) {
    out.append(TensorBytes(tensor), tensor.nbytes());
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const TensorFile& file,
                              const SafetensorsWriteOptions& options) {
  absl::StatusOr<Encoding> encoding = Encode(file);
  if (!encoding.ok()) return WithPath(path, encoding.status());
  // Tensor bytes are streamed from the tensors, not staged in one buffer.
  absl::StatusOr<base::AtomicFileWriter> writer = base::AtomicFileWriter::Create(path, 0666);
  if (!writer.ok()) return writer.status();
  if (absl::Status s = writer->Append(encoding->head); !s.ok()) return s;
  for (const at::Tensor& tensor : encoding->tensors) {
    if (absl::Status s = writer->Append(absl::string_view(TensorBytes(tensor), tensor.nbytes())); !s.ok())
      return s;
    if (options.after_each_tensor) options.after_each_tensor(tensor);
  }
  return writer->Commit();
}

}  // namespace slimfit::performer

// The safetensors reader: exhaustive header validation, then tensor bytes read straight into
// their tensors.
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "performer/safetensors.h"
#include "performer/safetensors_format.h"

namespace slimfit::performer {
namespace {

using namespace safetensors_internal;  // NOLINT: the format's own helpers

absl::Status ErrnoError(int err, absl::string_view what) { return absl::ErrnoToStatus(err, what); }

// -----------------------------------------------------------------------------
// Header decoding.

// A validated tensor entry of a safetensors header.
struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;  // byte range within the data section
  uint64_t end;
};

struct Header {
  std::vector<Entry> entries;  // in name order
  std::map<std::string, std::string> metadata;
};

uint64_t DecodeLittleEndian64(const char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(p[i]);
  }
  return value;
}

// Checks the length prefix (the first min(8, file_size) bytes, in `prefix`) of
// a file of `file_size` bytes and returns the header length.
absl::StatusOr<uint64_t> HeaderLength(absl::string_view prefix, uint64_t file_size) {
  if (file_size < kPrefixBytes) {
    return Invalid("file is ", file_size, " bytes, shorter than the 8-byte header length prefix");
  }
  const uint64_t length = DecodeLittleEndian64(prefix.data());
  if (length > kMaxHeaderBytes) {
    return Invalid("header length ", length, " exceeds the limit of ", kMaxHeaderBytes,
                   " bytes (not a safetensors file?)");
  }
  if (length > file_size - kPrefixBytes) {
    return Invalid("header length ", length, " exceeds the ", file_size - kPrefixBytes,
                   " bytes that follow the length prefix (file truncated?)");
  }
  return length;
}

// Parses `text` as JSON, rejecting duplicate keys in any object (nlohmann
// would silently keep the last one).
absl::StatusOr<Json> ParseJsonStrict(absl::string_view text) {
  std::vector<std::set<std::string>> open_objects;  // keys seen, per depth
  std::string duplicate;
  bool duplicate_is_tensor = false;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_is_tensor = open_objects.size() == 1;
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    return Invalid("header is not valid JSON: ", e.what());
  }
  if (!json.is_object()) {
    return Invalid("header is a JSON ", json.type_name(), ", expected an object");
  }
  if (!duplicate.empty()) {
    return Invalid("header has duplicate ", duplicate_is_tensor ? "tensor name '" : "key '", duplicate, "'");
  }
  return json;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& json) {
  if (!json.is_object()) {
    return Invalid("\"__metadata__\" is a JSON ", json.type_name(), ", expected an object of strings");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& item : json.items()) {
    if (!item.value().is_string()) {
      return Invalid("\"__metadata__\" value of key '", item.key(), "' is a ", item.value().type_name(),
                     ", expected a string");
    }
    metadata.emplace(item.key(), item.value().get<std::string>());
  }
  return metadata;
}

// Decodes one tensor entry and checks it against a data section of
// `data_size` bytes.
absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& json, uint64_t data_size) {
  if (!json.is_object()) {
    return Invalid("tensor '", name, "' entry is a JSON ", json.type_name(), ", expected an object");
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!json.contains(field)) {
      return Invalid("tensor '", name, "' has no \"", field, "\"");
    }
  }
  Entry entry;
  entry.name = name;

  const Json& dtype = json["dtype"];
  if (!dtype.is_string()) {
    return Invalid("tensor '", name, "' dtype is a JSON ", dtype.type_name(), ", expected a string");
  }
  absl::optional<at::ScalarType> type = DtypeFromName(dtype.get_ref<const std::string&>());
  if (!type) {
    return Invalid("tensor '", name, "' has unsupported dtype ", dtype.dump(),
                   " (supported: ", SupportedDtypes(), ")");
  }
  entry.dtype = *type;

  const Json& shape = json["shape"];
  if (!shape.is_array()) {
    return Invalid("tensor '", name, "' shape is a JSON ", shape.type_name(),
                   ", expected an array of integers");
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    const Json& dim = shape[i];
    if (dim.is_number_integer() && !dim.is_number_unsigned()) {
      return Invalid("tensor '", name, "' has negative dimension ", dim.get<int64_t>(), " at shape[", i, "]");
    }
    if (!dim.is_number_unsigned()) {
      return Invalid("tensor '", name, "' shape[", i, "] is ", dim.dump(),
                     ", expected a non-negative integer");
    }
    const uint64_t value = dim.get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid("tensor '", name, "' dimension ", value, " at shape[", i, "] does not fit in int64");
    }
    entry.shape.push_back(static_cast<int64_t>(value));
  }

  const Json& offsets = json["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return Invalid("tensor '", name, "' data_offsets is ", offsets.dump(),
                   ", expected [begin, end] of non-negative integers");
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  const std::string range = absl::StrCat("[", entry.begin, ", ", entry.end, "]");
  if (entry.begin > entry.end) {
    return Invalid("tensor '", name, "' data_offsets ", range, " have begin > end");
  }
  if (entry.end > data_size) {
    return Invalid("tensor '", name, "' data_offsets ", range, " exceed the ", data_size,
                   "-byte data section (file truncated?)");
  }

  // LibTorch computes a tensor's extent from max(dim, 1) for every dim, so it
  // must fit in int64 bytes even when a zero dim makes the tensor empty.
  const uint64_t element_size = c10::elementSize(entry.dtype);
  uint64_t extent = element_size;
  bool has_zero_dim = false;
  for (int64_t dim : entry.shape) {
    has_zero_dim |= dim == 0;
    if (__builtin_mul_overflow(extent, std::max<uint64_t>(dim, 1), &extent) ||
        extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid("tensor '", name, "' shape ", ShapeString(entry.shape),
                     " is too large: its dimensions multiply past 2^63 bytes");
    }
  }
  const uint64_t expected = has_zero_dim ? 0 : extent;
  const uint64_t span = entry.end - entry.begin;
  if (expected != span) {
    return Invalid("tensor '", name, "' of dtype ", dtype.get<std::string>(), " and shape ",
                   ShapeString(entry.shape), " needs ", expected, " bytes, but data_offsets ", range,
                   " span ", span);
  }
  return entry;
}

// Checks that the entries tile [0, data_size) exactly: no overlap, no hole, no
// trailing bytes (as the format requires, so a file has one interpretation).
absl::Status CheckTiling(const std::vector<Entry>& entries, uint64_t data_size) {
  std::vector<const Entry*> order;
  order.reserve(entries.size());
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : order) {
    if (e->begin < covered) {
      return Invalid("tensor '", e->name, "' data_offsets [", e->begin, ", ", e->end, "] overlap tensor '",
                     previous->name, "' data_offsets [", previous->begin, ", ", previous->end, "]");
    }
    if (e->begin > covered) {
      return Invalid("bytes [", covered, ", ", e->begin,
                     ") of the data section belong to no tensor (holes are "
                     "not allowed)");
    }
    covered = e->end;
    previous = e;
  }
  if (covered != data_size) {
    return Invalid("the data section is ", data_size, " bytes but the tensors cover only the first ", covered,
                   " (trailing bytes are not allowed)");
  }
  return absl::OkStatus();
}

// Decodes the JSON header `text`, given the size of the data section after it.
absl::StatusOr<Header> ParseHeader(absl::string_view text, uint64_t data_size) {
  absl::StatusOr<Json> json = ParseJsonStrict(text);
  if (!json.ok()) return json.status();
  Header header;
  for (const auto& item : json->items()) {
    if (item.key() == kMetadataKey) {
      absl::StatusOr<std::map<std::string, std::string>> metadata = ParseMetadata(item.value());
      if (!metadata.ok()) return metadata.status();
      header.metadata = *std::move(metadata);
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(item.key(), item.value(), data_size);
    if (!entry.ok()) return entry.status();
    header.entries.push_back(*std::move(entry));
  }
  absl::Status tiling = CheckTiling(header.entries, data_size);
  if (!tiling.ok()) return tiling;
  return header;
}

absl::StatusOr<at::Tensor> AllocateTensor(const Entry& entry) {
  try {
    return at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", entry.end - entry.begin,
                                                     " bytes for tensor '", entry.name,
                                                     "': ", e.what_without_backtrace()));
  }
}

// at::kBool tensors must hold 0 or 1 in every byte; anything else is
// undefined behaviour once read as bool.
absl::Status CheckBoolBytes(const Entry& entry, const at::Tensor& tensor) {
  if (entry.dtype != at::kBool) return absl::OkStatus();
  const auto* bytes = static_cast<const unsigned char*>(tensor.data_ptr());
  const int64_t n = tensor.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (bytes[i] > 1) {
      return Invalid("tensor '", entry.name, "' element ", i, " is byte ", static_cast<int>(bytes[i]),
                     "; BOOL elements must be 0 or 1");
    }
  }
  return absl::OkStatus();
}

// -----------------------------------------------------------------------------
// File helpers.

// Reads exactly `size` bytes at `offset`.
absl::Status ReadFully(int fd, char* out, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, std::numeric_limits<ssize_t>::max()));
    const ssize_t n = pread(fd, out, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("read at byte ", offset));
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat("file ended at byte ", offset, " while ", size,
                                              " more bytes were expected (did it shrink while being read?)"));
    }
    out += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// An open regular file for reading; closes on destruction.
class InputFile {
 public:
  // Errors are not prefixed with the path; callers add it.
  static absl::StatusOr<InputFile> Open(const std::string& path) {
    int fd;
    do {
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoError(errno, "cannot open");
    InputFile file(fd);
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoError(errno, "cannot stat");
    if (!S_ISREG(st.st_mode)) return Invalid("not a regular file");
    file.size_ = static_cast<uint64_t>(st.st_size);
    return file;
  }

  InputFile(InputFile&& other) noexcept : fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (fd_ >= 0) close(fd_);
  }

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  explicit InputFile(int fd) : fd_(fd) {}
  int fd_;
  uint64_t size_ = 0;
};

}  // namespace

absl::StatusOr<TensorFile> ParseSafetensors(absl::string_view bytes) {
  absl::StatusOr<uint64_t> header_length = HeaderLength(bytes, bytes.size());
  if (!header_length.ok()) return header_length.status();
  const absl::string_view data = bytes.substr(kPrefixBytes + *header_length);
  absl::StatusOr<Header> header = ParseHeader(bytes.substr(kPrefixBytes, *header_length), data.size());
  if (!header.ok()) return header.status();

  TensorFile file;
  file.metadata = std::move(header->metadata);
  for (Entry& entry : header->entries) {
    absl::StatusOr<at::Tensor> tensor = AllocateTensor(entry);
    if (!tensor.ok()) return tensor.status();
    if (entry.end > entry.begin) {
      std::memcpy(tensor->data_ptr(), data.data() + entry.begin, entry.end - entry.begin);
    }
    absl::Status bools = CheckBoolBytes(entry, *tensor);
    if (!bools.ok()) return bools;
    file.tensors.emplace(std::move(entry.name), *std::move(tensor));
  }
  return file;
}

absl::StatusOr<TensorFile> ReadSafetensors(const std::string& path) {
  absl::StatusOr<InputFile> input = InputFile::Open(path);
  if (!input.ok()) return WithPath(path, input.status());
  const uint64_t size = input->size();

  char prefix[kPrefixBytes] = {};
  if (size >= kPrefixBytes) {
    absl::Status read = ReadFully(input->fd(), prefix, kPrefixBytes, 0);
    if (!read.ok()) return WithPath(path, read);
  }
  absl::StatusOr<uint64_t> header_length = HeaderLength(absl::string_view(prefix, kPrefixBytes), size);
  if (!header_length.ok()) return WithPath(path, header_length.status());

  std::string text(*header_length, '\0');
  absl::Status read = ReadFully(input->fd(), text.data(), text.size(), kPrefixBytes);
  if (!read.ok()) return WithPath(path, read);
  const uint64_t data_start = kPrefixBytes + *header_length;
  absl::StatusOr<Header> header = ParseHeader(text, size - data_start);
  if (!header.ok()) return WithPath(path, header.status());

  TensorFile file;
  file.metadata = std::move(header->metadata);
  for (Entry& entry : header->entries) {
    absl::StatusOr<at::Tensor> tensor = AllocateTensor(entry);
    if (!tensor.ok()) return WithPath(path, tensor.status());
    read = ReadFully(input->fd(), static_cast<char*>(tensor->data_ptr()), entry.end - entry.begin,
                     data_start + entry.begin);
    if (read.ok()) read = CheckBoolBytes(entry, *tensor);
    if (!read.ok()) return WithPath(path, read);
    file.tensors.emplace(std::move(entry.name), *std::move(tensor));
  }
  return file;
}

}  // namespace slimfit::performer

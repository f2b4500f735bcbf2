#include "performer/torch_state_dict.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "performer/torch_archive.h"

namespace slimfit::performer {
namespace {

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

// LibTorch's unpickler turns the collections.OrderedDict global into None
// (harmless for the empty OrderedDict of backward hooks that every pickled
// tensor carries), so an OrderedDict state dict loads as None when empty and
// otherwise fails when its items are set on that None.
bool MentionsOrderedDict(const std::vector<char>& bytes) {
  // Pickles name globals in plain text; torch.save stores data.pkl
  // uncompressed.
  static constexpr absl::string_view kName = "OrderedDict";
  return std::search(bytes.begin(), bytes.end(), kName.begin(), kName.end()) != bytes.end();
}

absl::Status OrderedDictError(const std::string& path) {
  return Invalid(path,
                 ": the file holds a collections.OrderedDict, which LibTorch "
                 "cannot read; save it as torch.save(dict(model.state_dict()), "
                 "path) or as safetensors");
}

absl::Status PickleLoadError(const std::string& path, const std::vector<char>& bytes,
                             absl::string_view what) {
  if (absl::StrContains(what, "Expected GenericDict but got None") && MentionsOrderedDict(bytes)) {
    return OrderedDictError(path);
  }
  return Invalid(path, ": cannot unpickle the torch.save file: ", what);
}

// The archive check's refusal, saying how to re-save a legacy torch.save file.
absl::Status ArchiveError(const std::string& path, const std::vector<char>& bytes,
                          const absl::Status& status) {
  // A legacy torch.save file is a bare pickle stream: PROTO opcode 0x80.
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) {
    return Invalid(path,
                   ": LibTorch failed finding the zip central directory: the "
                   "file uses PyTorch's legacy torch.save format "
                   "(_use_new_zipfile_serialization=False), which LibTorch "
                   "cannot read; re-save it with "
                   "torch.save(dict(state_dict), path) in the default zip "
                   "format, or as safetensors");
  }
  return Invalid(path, ": ", status.message());
}

// The file's bytes for LibTorch's reader; reads stop at the end (LibTorch's
// own MemoryReadAdapter does not check).
class BytesReadAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReadAdapter(const std::vector<char>& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& bytes_;
};

// What torch::jit::pickle_load does (the archive's data.pkl unpickled, tensor
// storages read from its data/ records, here always into CPU memory), keeping the size of every record
// handed to the unpickler, by the address of its bytes.
c10::IValue Unpickle(const std::vector<char>& bytes, std::map<const void*, size_t>* record_sizes) {
  caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReadAdapter>(bytes));
  at::DataPtr pickle;
  size_t pickle_size = 0;
  std::tie(pickle, pickle_size) = reader.getRecord("data.pkl");
  size_t consumed = 0;
  auto read_pickle = [&](char* buffer, size_t n) -> size_t {
    n = std::min(n, pickle_size - consumed);
    if (n > 0) {
      std::memcpy(buffer, static_cast<const char*>(pickle.get()) + consumed, n);
    }
    consumed += n;
    return n;
  };
  auto read_record = [&](const std::string& key) {
    at::DataPtr data;
    size_t size = 0;
    std::tie(data, size) = reader.getRecord("data/" + key);
    (*record_sizes)[data.get()] = size;
    return data;
  };
  // Storages stay on the CPU whatever device they were saved from (torch.load's
  // map_location="cpu").
  torch::jit::Unpickler unpickler(read_pickle, /*type_resolver=*/nullptr,
                                  /*obj_loader=*/nullptr, read_record,
                                  /*device=*/at::Device(at::kCPU));
  unpickler.set_version(reader.version());
  return unpickler.parse_ivalue();
}

// LibTorch's unpickler takes a storage's size and a tensor's sizes, strides
// and offset from the pickle without checking them against the bytes read:
// a tensor must lie inside its storage, and the storage inside the record it
// was read from.
absl::Status CheckTensorBounds(const at::Tensor& tensor, const std::map<const void*, size_t>& records) {
  if (!tensor.defined() || tensor.layout() != at::kStrided || !tensor.has_storage() ||
      !tensor.device().is_cpu()) {
    return absl::InvalidArgumentError("not a dense CPU tensor with its own storage");
  }
  const c10::Storage& storage = tensor.storage();
  const size_t storage_bytes = storage.nbytes();
  if (storage_bytes > 0) {
    auto record = records.find(storage.data());
    if (storage.data() == nullptr || record == records.end() || storage_bytes > record->second) {
      return absl::InvalidArgumentError(
          absl::StrCat("its storage of ", storage_bytes, " bytes is larger than the ",
                       record == records.end() ? 0 : record->second, " bytes stored for it"));
    }
  }
  if (tensor.storage_offset() < 0) {
    return absl::InvalidArgumentError("negative storage offset");
  }
  // Bytes up to the furthest element, in __int128 so forged sizes cannot
  // overflow the sum.
  __int128 last = tensor.storage_offset();
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    if (tensor.size(d) < 0 || tensor.stride(d) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative size or stride in dimension ", d));
    }
    if (tensor.size(d) == 0) return absl::OkStatus();  // no element
    last += static_cast<__int128>(tensor.size(d) - 1) * tensor.stride(d);
  }
  const __int128 end = (last + 1) * static_cast<__int128>(tensor.itemsize());
  if (end > static_cast<__int128>(storage_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("its shape, strides and offset reach past its ", storage_bytes, "-byte storage"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> ReadTorchStateDict(const std::string& path) {
  std::vector<char> bytes;
  {
    absl::StatusOr<std::string> contents = base::ReadFileToString(path);
    if (!contents.ok()) return contents.status();
    bytes.assign(contents->begin(), contents->end());
  }

  // LibTorch's reader leaks or over-allocates on some malformed archives:
  // it only sees archives laid out as torch.save writes them.
  absl::StatusOr<torch_archive_internal::TorchArchive> archive =
      torch_archive_internal::CheckTorchArchive(absl::string_view(bytes.data(), bytes.size()));
  if (!archive.ok()) return ArchiveError(path, bytes, archive.status());

  c10::IValue value;
  std::map<const void*, size_t> record_sizes;
  try {
    value = Unpickle(bytes, &record_sizes);
  } catch (const c10::Error& e) {
    return PickleLoadError(path, bytes, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return PickleLoadError(path, bytes, e.what());
  }
  if (!value.isGenericDict()) {
    if (value.isNone() && MentionsOrderedDict(bytes)) {
      return OrderedDictError(path);
    }
    return Invalid(path, ": the file holds a ", value.tagKind(), ", expected a dict of tensors");
  }

  c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict();
  std::string nesting;  // where the returned dict sits, for messages
  for (const char* key : {"state_dict", "model"}) {
    auto it = dict.find(c10::IValue(key));
    if (it != dict.end() && it->value().isGenericDict()) {
      dict = it->value().toGenericDict();
      nesting = absl::StrCat(" under '", key, "'");
      break;
    }
  }
  std::map<std::string, at::Tensor> tensors;
  for (const auto& item : dict) {
    if (!item.key().isString()) {
      return Invalid(path, ": the dict", nesting, " has a ", item.key().tagKind(),
                     " key; expected string keys");
    }
    const std::string& key = item.key().toStringRef();
    if (!item.value().isTensor()) {
      return Invalid(path, ": value of key '", key, "'", nesting, " is a ", item.value().tagKind(),
                     ", not a tensor",
                     item.value().isNone() ? " (LibTorch also reads an empty "
                                             "collections.OrderedDict as None)"
                                           : "");
    }
    if (absl::Status bounds = CheckTensorBounds(item.value().toTensor(), record_sizes); !bounds.ok()) {
      return Invalid(path, ": tensor '", key, "'", nesting, " is corrupt: ", bounds.message());
    }
    tensors.emplace(key, item.value().toTensor());
  }
  return tensors;
}

}  // namespace slimfit::performer

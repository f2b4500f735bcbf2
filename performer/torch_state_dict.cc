#include "performer/torch_state_dict.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"

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
  return std::search(bytes.begin(), bytes.end(), kName.begin(), kName.end()) !=
         bytes.end();
}

absl::Status OrderedDictError(const std::string& path) {
  return Invalid(path,
                 ": the file holds a collections.OrderedDict, which LibTorch "
                 "cannot read; save it as torch.save(dict(model.state_dict()), "
                 "path) or as safetensors");
}

absl::Status PickleLoadError(const std::string& path,
                             const std::vector<char>& bytes,
                             absl::string_view what) {
  if (absl::StrContains(what, "central directory") ||
      absl::StrContains(what, "not a ZIP archive")) {
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
    return Invalid(path, ": not a torch.save zip archive (", what, ")");
  }
  if (absl::StrContains(what, "Expected GenericDict but got None") &&
      MentionsOrderedDict(bytes)) {
    return OrderedDictError(path);
  }
  return Invalid(path, ": cannot unpickle the torch.save file: ", what);
}

}  // namespace

absl::StatusOr<std::map<std::string, at::Tensor>> ReadTorchStateDict(
    const std::string& path) {
  std::vector<char> bytes;
  {
    absl::StatusOr<std::string> contents = base::ReadFileToString(path);
    if (!contents.ok()) return contents.status();
    bytes.assign(contents->begin(), contents->end());
  }

  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    return PickleLoadError(path, bytes, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return PickleLoadError(path, bytes, e.what());
  }
  if (!value.isGenericDict()) {
    if (value.isNone() && MentionsOrderedDict(bytes)) {
      return OrderedDictError(path);
    }
    return Invalid(path, ": the file holds a ", value.tagKind(),
                   ", expected a dict of tensors");
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
      return Invalid(path, ": the dict", nesting, " has a ",
                     item.key().tagKind(), " key; expected string keys");
    }
    const std::string& key = item.key().toStringRef();
    if (!item.value().isTensor()) {
      return Invalid(path, ": value of key '", key, "'", nesting, " is a ",
                     item.value().tagKind(), ", not a tensor",
                     item.value().isNone() ? " (LibTorch also reads an empty "
                                             "collections.OrderedDict as None)"
                                           : "");
    }
    try {
      // A no-op for CPU tensors; a LibTorch built with CUDA restores CUDA
      // tensors on their device.
      tensors.emplace(key, item.value().toTensor().to(at::kCPU));
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat(path, ": cannot copy tensor '", key,
                       "' to CPU memory: ", e.what_without_backtrace()));
    }
  }
  return tensors;
}

}  // namespace slimfit::performer

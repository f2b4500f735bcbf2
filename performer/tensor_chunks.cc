#include "performer/tensor_chunks.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "performer/performer_model.h"

namespace slimfit::performer {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

v1::DType WireDType(DType dtype) { return dtype == DType::kFloat64 ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32; }

std::string ShapeString(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

}  // namespace

v1::TensorInfo ToTensorInfo(const TensorSpec& spec, DType dtype) {
  v1::TensorInfo info;
  info.set_name(spec.name);
  info.set_dtype(WireDType(dtype));
  for (int64_t d : spec.shape) info.add_shape(d);
  info.set_bytes(Elements(spec.shape) * DTypeBytes(dtype));
  return info;
}

absl::Status ChunkTensors(const std::vector<std::string>& names, const std::vector<at::Tensor>& tensors,
                          DType dtype, const std::function<bool(const v1::TensorChunk&)>& emit,
                          int64_t max_chunk_bytes) {
  if (names.size() != tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChunkTensors: ", names.size(), " names for ", tensors.size(), " tensors"));
  }
  const int64_t element = DTypeBytes(dtype);
  const int64_t chunk_bytes = std::max<int64_t>(element, max_chunk_bytes / element * element);
  v1::TensorChunk chunk;
  for (size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor cpu;
    try {
      cpu = tensors[i].detach().to(at::kCPU, ToScalarType(dtype)).contiguous();
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("copying tensor ", names[i], " to the CPU: ", e.what_without_backtrace()));
    }
    const char* data = static_cast<const char*>(cpu.data_ptr());
    const int64_t total = cpu.numel() * element;
    chunk.Clear();
    chunk.set_name(names[i]);
    chunk.set_dtype(WireDType(dtype));
    for (int64_t d : cpu.sizes()) chunk.add_shape(d);
    for (int64_t offset = 0; offset < total; offset += chunk_bytes) {
      const int64_t size = std::min(chunk_bytes, total - offset);
      chunk.set_offset(offset);
      chunk.set_data(data + offset, static_cast<size_t>(size));
      if (!emit(chunk)) return absl::CancelledError(absl::StrCat("stream stopped while sending ", names[i]));
    }
  }
  return absl::OkStatus();
}

TensorAssembler::TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what)
    : specs_(std::move(specs)), dtype_(dtype), what_(std::move(what)) {
  tensors_.resize(specs_.size());
}

absl::Status TensorAssembler::Add(const v1::TensorChunk& chunk) {
  auto error = [&](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": chunk of \"", chunk.name(), "\" at offset ",
                                                   chunk.offset(), ": ", message));
  };
  const int64_t element = DTypeBytes(dtype_);
  // A tensor is complete when offset_ reached its size; move on to the next one.
  if (current_ < specs_.size() && tensors_[current_].defined() &&
      offset_ == Elements(specs_[current_].shape) * element) {
    ++current_;
    offset_ = 0;
  }
  if (current_ >= specs_.size()) return error("every expected tensor is already complete");
  const TensorSpec& spec = specs_[current_];
  if (chunk.name() != spec.name) {
    return error(absl::StrCat("expected a chunk of \"", spec.name, "\" (tensor ", current_ + 1, " of ",
                              specs_.size(), ")"));
  }
  if (chunk.dtype() != WireDType(dtype_)) {
    return error(absl::StrCat("dtype ", v1::DType_Name(chunk.dtype()), ", expected ",
                              v1::DType_Name(WireDType(dtype_))));
  }
  std::vector<int64_t> shape(chunk.shape().begin(), chunk.shape().end());
  if (shape != spec.shape) {
    return error(absl::StrCat("shape ", ShapeString(shape), ", expected ", ShapeString(spec.shape)));
  }
  if (chunk.offset() != offset_) return error(absl::StrCat("expected offset ", offset_));
  const int64_t size = static_cast<int64_t>(chunk.data().size());
  const int64_t total = Elements(spec.shape) * element;
  if (size == 0 || size > v1::LIMIT_MAX_CHUNK_BYTES) {
    return error(absl::StrCat(size, " data bytes; a chunk holds 1..", v1::LIMIT_MAX_CHUNK_BYTES));
  }
  if (size % element != 0) return error(absl::StrCat(size, " bytes is not a whole number of elements"));
  if (offset_ + size > total) {
    return error(absl::StrCat("data runs to byte ", offset_ + size, " of a ", total, "-byte tensor"));
  }
  if (!tensors_[current_].defined()) {
    tensors_[current_] = at::empty(spec.shape, at::TensorOptions().dtype(ToScalarType(dtype_)));
  }
  std::memcpy(static_cast<char*>(tensors_[current_].data_ptr()) + offset_, chunk.data().data(),
              static_cast<size_t>(size));
  offset_ += size;
  bytes_received_ += size;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<at::Tensor>> TensorAssembler::Finish() {
  const int64_t element = DTypeBytes(dtype_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t total = Elements(specs_[i].shape) * element;
    const bool complete = tensors_[i].defined() && (i < current_ || (i == current_ && offset_ == total));
    if (!complete) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": tensor \"", specs_[i].name, "\" (", i + 1, " of ",
                                                     specs_.size(), ") is incomplete"));
    }
  }
  return tensors_;
}

}  // namespace slimfit::performer

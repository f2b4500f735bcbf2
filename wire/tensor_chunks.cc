#include "wire/tensor_chunks.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "performer/file_backed_tensors.h"
#include "performer/performer_model.h"

namespace slimfit::performer {
namespace {

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

v1::DType WireDType(DType dtype) { return dtype == DType::kFloat64 ? v1::DTYPE_FLOAT64 : v1::DTYPE_FLOAT32; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

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
      return absl::InternalError(
          absl::StrCat("copying tensor ", names[i], " to the CPU: ", e.what_without_backtrace()));
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

int64_t ChunkWireBytes(const v1::TensorChunk& chunk) {
  return static_cast<int64_t>(chunk.data().size()) + 4 * static_cast<int64_t>(chunk.scales_size());
}

absl::Status ChunkEncoded(const std::vector<std::string>& names, const std::vector<EncodedTensor>& tensors,
                          DType dtype, const std::function<bool(const v1::TensorChunk&)>& emit,
                          int64_t max_chunk_bytes) {
  if (names.size() != tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ChunkEncoded: ", names.size(), " names for ", tensors.size(), " tensors"));
  }
  const int64_t element = DTypeBytes(dtype);
  v1::TensorChunk chunk;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const EncodedTensor& tensor = tensors[i];
    const int64_t wire_element = CompressedElementBytes(tensor.compression);
    const size_t want_scales =
        tensor.compression == v1::COMPRESSION_INT8
            ? static_cast<size_t>((tensor.numel() + v1::LIMIT_INT8_BLOCK_ELEMENTS - 1) /
                                  v1::LIMIT_INT8_BLOCK_ELEMENTS)
            : 0;
    if (wire_element == 0 || static_cast<int64_t>(tensor.data.size()) != tensor.numel() * wire_element ||
        tensor.scales.size() != want_scales) {
      return absl::InvalidArgumentError(
          absl::StrCat("ChunkEncoded: tensor ", names[i], " is not a whole encoded tensor"));
    }
    const bool int8 = tensor.compression == v1::COMPRESSION_INT8;
    const int64_t block = v1::LIMIT_INT8_BLOCK_ELEMENTS;
    int64_t per_chunk = std::max<int64_t>(1, max_chunk_bytes / wire_element);
    if (int8) per_chunk = std::max(block, per_chunk / block * block);
    chunk.Clear();
    chunk.set_name(names[i]);
    chunk.set_dtype(WireDType(dtype));
    chunk.set_compression(tensor.compression);
    for (int64_t d : tensor.shape) chunk.add_shape(d);
    const int64_t n = tensor.numel();
    for (int64_t first = 0; first < n; first += per_chunk) {
      const int64_t count = std::min(per_chunk, n - first);
      chunk.set_offset(first * element);
      chunk.set_data(tensor.data.data() + first * wire_element, static_cast<size_t>(count * wire_element));
      chunk.clear_scales();
      if (int8) {
        for (int64_t b = first / block; b < (first + count + block - 1) / block; ++b) {
          chunk.add_scales(tensor.scales[static_cast<size_t>(b)]);
        }
      }
      if (!emit(chunk)) return absl::CancelledError(absl::StrCat("stream stopped while sending ", names[i]));
    }
  }
  return absl::OkStatus();
}

TensorAssembler::TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what,
                                 v1::Compression compression)
    : specs_(std::move(specs)),
      dtype_(dtype),
      what_(std::move(what)),
      compression_(IsCompressed(compression) ? compression : v1::COMPRESSION_NONE) {
  tensors_.resize(specs_.size());
  started_.assign(specs_.size(), false);
}

TensorAssembler::TensorAssembler(std::vector<TensorSpec> specs, DType dtype, std::string what,
                                 v1::Compression compression, ValueSink sink)
    : TensorAssembler(std::move(specs), dtype, std::move(what), compression) {
  sink_ = std::move(sink);
}

absl::Status TensorAssembler::Add(const v1::TensorChunk& chunk) {
  auto where = [&]() {
    return absl::StrCat(what_, ": chunk of \"", chunk.name(), "\" at offset ", chunk.offset(), ": ");
  };
  auto error = [&](const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(where(), message));
  };
  const int64_t element = DTypeBytes(dtype_);
  // A tensor is complete when offset_ reached its size; move on to the next one.
  if (current_ < specs_.size() && started_[current_] &&
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
  const v1::Compression encoding =
      IsCompressed(chunk.compression()) ? chunk.compression() : v1::COMPRESSION_NONE;
  if (encoding != compression_) {
    return error(absl::StrCat("encoding ", CompressionName(chunk.compression()), ", expected ",
                              CompressionName(compression_)));
  }
  if (encoding != v1::COMPRESSION_INT8 && chunk.scales_size() > 0) {
    return error(absl::StrCat(chunk.scales_size(), " scales on a chunk that is not int8"));
  }
  if (chunk.offset() != offset_) return error(absl::StrCat("expected offset ", offset_));
  const int64_t size = static_cast<int64_t>(chunk.data().size());
  const int64_t total = Elements(spec.shape) * element;
  if (size == 0 || size > v1::LIMIT_MAX_CHUNK_BYTES) {
    return error(absl::StrCat(size, " data bytes; a chunk holds 1..", v1::LIMIT_MAX_CHUNK_BYTES));
  }
  const int64_t wire_element = IsCompressed(encoding) ? CompressedElementBytes(encoding) : element;
  if (size % wire_element != 0) return error(absl::StrCat(size, " bytes is not a whole number of elements"));
  const int64_t count = size / wire_element;
  if (offset_ + count * element > total) {
    return error(
        absl::StrCat("data runs to byte ", offset_ + count * element, " of a ", total, "-byte tensor"));
  }
  if (encoding == v1::COMPRESSION_INT8 && (offset_ + count * element) != total &&
      count % v1::LIMIT_INT8_BLOCK_ELEMENTS != 0) {
    return error(absl::StrCat(count, " int8 elements: a chunk ends on a block of ",
                              v1::LIMIT_INT8_BLOCK_ELEMENTS, " or at the tensor's end"));
  }
  if (sink_) {
    if (absl::Status s = Stream(chunk, count); !s.ok())
      return absl::Status(s.code(), absl::StrCat(where(), s.message()));
  } else {
    if (!tensors_[current_].defined()) {
      if (!file_directory_.empty()) {
        absl::StatusOr<at::Tensor> in_file =
            FileBackedZeros(file_directory_, spec.shape, ToScalarType(dtype_));
        if (in_file.ok()) {
          tensors_[current_] = *std::move(in_file);
        } else if (file_error_.ok()) {
          file_error_ =
              absl::Status(in_file.status().code(), absl::StrCat(where(), in_file.status().message()));
        }
      }
      if (!tensors_[current_].defined()) {  // in memory: the default, or no file could be made
        tensors_[current_] = at::empty(spec.shape, at::TensorOptions().dtype(ToScalarType(dtype_)));
      }
    }
    char* out = static_cast<char*>(tensors_[current_].data_ptr()) + offset_;
    if (IsCompressed(encoding)) {
      if (absl::Status s = Decode(chunk, count, out); !s.ok()) return error(std::string(s.message()));
    } else {
      std::memcpy(out, chunk.data().data(), static_cast<size_t>(size));
    }
  }
  started_[current_] = true;
  offset_ += count * element;
  if (offset_ == total && !sink_) ReleaseResidentPages(tensors_[current_]);  // complete: file-backed pages go
  bytes_received_ += ChunkWireBytes(chunk);
  return absl::OkStatus();
}

absl::Status TensorAssembler::Decode(const v1::TensorChunk& chunk, int64_t count, void* out) const {
  const absl::Span<const float> scales(chunk.scales().data(), static_cast<size_t>(chunk.scales_size()));
  if (dtype_ == DType::kFloat32)
    return DecodeElements(compression_, chunk.data(), scales, count, static_cast<float*>(out));
  std::vector<float> decoded(static_cast<size_t>(count));
  if (absl::Status s = DecodeElements(compression_, chunk.data(), scales, count, decoded.data()); !s.ok())
    return s;
  double* values = static_cast<double*>(out);
  for (int64_t i = 0; i < count; ++i) values[i] = decoded[static_cast<size_t>(i)];
  return absl::OkStatus();
}

absl::Status TensorAssembler::Stream(const v1::TensorChunk& chunk, int64_t count) {
  const int64_t element = DTypeBytes(dtype_);
  const at::TensorOptions options = at::TensorOptions().dtype(ToScalarType(dtype_));
  const char* data = chunk.data().data();
  at::Tensor values;
  if (compression_ == v1::COMPRESSION_NONE &&
      reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(element) == 0) {
    // The chunk's own bytes, not copied: the sink must only read them (ValueSink's contract).
    values = at::from_blob(const_cast<char*>(data), {count}, options);
  } else {
    if (!scratch_.defined() || scratch_.numel() < count) scratch_ = at::empty({count}, options);
    values = scratch_.narrow(0, 0, count);
    if (compression_ == v1::COMPRESSION_NONE) {
      std::memcpy(values.data_ptr(), data, static_cast<size_t>(count * element));
    } else if (absl::Status s = Decode(chunk, count, values.data_ptr()); !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
  }
  return sink_(current_, offset_ / element, values);
}

absl::StatusOr<std::vector<at::Tensor>> TensorAssembler::Finish() {
  if (tensors_.size() != specs_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(what_, ": the tensors were taken already"));
  }
  const int64_t element = DTypeBytes(dtype_);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t total = Elements(specs_[i].shape) * element;
    const bool complete = started_[i] && (i < current_ || (i == current_ && offset_ == total));
    if (!complete) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": tensor \"", specs_[i].name, "\" (", i + 1,
                                                     " of ", specs_.size(), ") is incomplete"));
    }
  }
  std::vector<at::Tensor> tensors = std::move(tensors_);
  tensors_.clear();
  if (sink_) tensors.clear();  // streamed: nothing was held
  return tensors;
}

}  // namespace slimfit::performer

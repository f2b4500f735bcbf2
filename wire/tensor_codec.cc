#include "wire/tensor_codec.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace slimfit::performer {
namespace {

constexpr int64_t kBlock = v1::LIMIT_INT8_BLOCK_ELEMENTS;

int64_t Blocks(int64_t count) { return (count + kBlock - 1) / kBlock; }

uint16_t HalfBits(float x) { return c10::Half(x).x; }
uint16_t BFloat16Bits(float x) { return c10::BFloat16(x).x; }  // round to nearest even

float FromHalfBits(uint16_t bits) {
  c10::Half h;
  h.x = bits;
  return static_cast<float>(h);
}

float FromBFloat16Bits(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

void Put16(char* out, uint16_t bits) {  // little-endian
  out[0] = static_cast<char>(bits & 0xff);
  out[1] = static_cast<char>(bits >> 8);
}

uint16_t Get16(const char* in) {
  return static_cast<uint16_t>(static_cast<uint8_t>(in[0]) |
                               (static_cast<uint16_t>(static_cast<uint8_t>(in[1])) << 8));
}

}  // namespace

bool IsCompressed(v1::Compression compression) {
  return compression == v1::COMPRESSION_FLOAT16 || compression == v1::COMPRESSION_BFLOAT16 ||
         compression == v1::COMPRESSION_INT8;
}

int64_t CompressedElementBytes(v1::Compression compression) {
  switch (compression) {
    case v1::COMPRESSION_FLOAT16:
    case v1::COMPRESSION_BFLOAT16:
      return 2;
    case v1::COMPRESSION_INT8:
      return 1;
    default:
      return 0;
  }
}

std::string CompressionName(v1::Compression compression) {
  switch (compression) {
    case v1::COMPRESSION_FLOAT16:
      return "float16";
    case v1::COMPRESSION_BFLOAT16:
      return "bfloat16";
    case v1::COMPRESSION_INT8:
      return "int8";
    default:
      return "none";
  }
}

absl::StatusOr<v1::Compression> CompressionFromName(absl::string_view name) {
  for (v1::Compression c :
       {v1::COMPRESSION_NONE, v1::COMPRESSION_FLOAT16, v1::COMPRESSION_BFLOAT16, v1::COMPRESSION_INT8}) {
    if (name == CompressionName(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression \"", name, "\"; choose none, float16, bfloat16 or int8"));
}

int64_t EncodedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<EncodedTensor> EncodeTensor(const at::Tensor& values, v1::Compression compression) {
  if (!IsCompressed(compression)) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodeTensor: ", v1::Compression_Name(compression), " is not a compressed encoding"));
  }
  at::Tensor cpu;
  try {
    cpu = values.detach().to(at::kCPU, at::kFloat).contiguous();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("copying a tensor to the CPU to encode it: ", e.what_without_backtrace()));
  }
  EncodedTensor encoded;
  encoded.shape = cpu.sizes().vec();
  encoded.compression = compression;
  const int64_t n = cpu.numel();
  const float* x = cpu.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("element ", i, " is ", x[i], ": only finite values can be encoded"));
    }
  }
  encoded.data.resize(static_cast<size_t>(n * CompressedElementBytes(compression)));
  char* out = encoded.data.data();
  switch (compression) {
    case v1::COMPRESSION_FLOAT16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = HalfBits(x[i]);
        if (!std::isfinite(FromHalfBits(bits))) {
          return absl::InvalidArgumentError(
              absl::StrCat("element ", i, " is ", x[i], ", beyond float16's range (±65504)"));
        }
        Put16(out + 2 * i, bits);
      }
      break;
    case v1::COMPRESSION_BFLOAT16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = BFloat16Bits(x[i]);
        if (!std::isfinite(FromBFloat16Bits(bits))) {
          return absl::InvalidArgumentError(
              absl::StrCat("element ", i, " is ", x[i], ", which rounds beyond bfloat16's range"));
        }
        Put16(out + 2 * i, bits);
      }
      break;
    default: {  // INT8
      encoded.scales.resize(static_cast<size_t>(Blocks(n)));
      for (int64_t b = 0; b * kBlock < n; ++b) {
        const int64_t begin = b * kBlock;
        const int64_t end = std::min(n, begin + kBlock);
        float max_abs = 0;
        for (int64_t i = begin; i < end; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
        const float scale = max_abs / 127.0f;
        if (!std::isfinite(127.0f * scale)) {
          return absl::InvalidArgumentError(
              absl::StrCat("block ", b, " has magnitude ", max_abs, ", too large for a float32 int8 scale"));
        }
        encoded.scales[static_cast<size_t>(b)] = scale;
        for (int64_t i = begin; i < end; ++i) {
          float q = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;  // round half to even
          q = std::min(127.0f, std::max(-127.0f, q));
          out[i] = static_cast<char>(static_cast<int8_t>(q));
        }
      }
      break;
    }
  }
  return encoded;
}

absl::Status DecodeElements(v1::Compression compression, absl::string_view data,
                            absl::Span<const float> scales, int64_t count, float* out) {
  const int64_t element = CompressedElementBytes(compression);
  if (element == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(v1::Compression_Name(compression), " is not a compressed encoding"));
  }
  if (static_cast<int64_t>(data.size()) != count * element) {
    return absl::InvalidArgumentError(absl::StrCat(data.size(), " bytes for ", count, " ",
                                                   CompressionName(compression), " elements (",
                                                   count * element, " expected)"));
  }
  const int64_t want_scales = compression == v1::COMPRESSION_INT8 ? Blocks(count) : 0;
  if (static_cast<int64_t>(scales.size()) != want_scales) {
    return absl::InvalidArgumentError(absl::StrCat(scales.size(), " scales for ", count, " ",
                                                   CompressionName(compression), " elements (", want_scales,
                                                   " expected)"));
  }
  const char* in = data.data();
  switch (compression) {
    case v1::COMPRESSION_FLOAT16:
      for (int64_t i = 0; i < count; ++i) out[i] = FromHalfBits(Get16(in + 2 * i));
      break;
    case v1::COMPRESSION_BFLOAT16:
      for (int64_t i = 0; i < count; ++i) out[i] = FromBFloat16Bits(Get16(in + 2 * i));
      break;
    default:  // INT8
      for (size_t b = 0; b < scales.size(); ++b) {
        if (!std::isfinite(scales[b]) || scales[b] < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("scale ", b, " is ", scales[b], "; scales are finite and ≥ 0"));
        }
      }
      for (int64_t i = 0; i < count; ++i) {
        const int8_t q = static_cast<int8_t>(in[i]);
        if (q == -128)
          return absl::InvalidArgumentError(absl::StrCat("int8 element ", i, " is -128; values are in ±127"));
        out[i] = static_cast<float>(q) * scales[static_cast<size_t>(i / kBlock)];
      }
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> DecodeTensor(const EncodedTensor& encoded) {
  at::Tensor out = at::empty(encoded.shape, at::TensorOptions().dtype(at::kFloat));
  if (absl::Status s = DecodeElements(encoded.compression, encoded.data, encoded.scales, encoded.numel(),
                                      out.data_ptr<float>());
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<at::Tensor> AddDifference(const at::Tensor& base, const at::Tensor& difference) {
  if (!base.sizes().equals(difference.sizes())) {
    return absl::InternalError(absl::StrCat("adding a parameter difference of shape ",
                                            c10::str(difference.sizes()), " to a tensor of shape ",
                                            c10::str(base.sizes())));
  }
  try {
    return at::add(base, difference.to(base.device(), base.scalar_type()));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("adding a parameter difference: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<EncodedDifference> EncodeDifference(const std::vector<at::Tensor>& base,
                                                   const std::vector<at::Tensor>& target,
                                                   v1::Compression compression) {
  if (base.size() != target.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a difference of ", target.size(), " tensors to a version of ", base.size()));
  }
  EncodedDifference result;
  for (size_t t = 0; t < base.size(); ++t) {
    if (!base[t].sizes().equals(target[t].sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t, " has shape ", c10::str(target[t].sizes()),
                                                     "; the base's is ", c10::str(base[t].sizes())));
    }
    at::Tensor difference;
    try {
      difference = target[t].detach().to(at::kCPU, base[t].scalar_type()).sub(base[t]);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat("tensor ", t, ": ", e.what_without_backtrace()));
    }
    absl::StatusOr<EncodedTensor> encoded = EncodeTensor(difference, compression);
    if (!encoded.ok()) {
      return absl::Status(encoded.status().code(),
                          absl::StrCat("tensor ", t, ": ", encoded.status().message()));
    }
    absl::StatusOr<at::Tensor> decoded = DecodeTensor(*encoded);
    if (!decoded.ok()) return decoded.status();
    absl::StatusOr<at::Tensor> rebuilt = AddDifference(base[t], *decoded);
    if (!rebuilt.ok()) return rebuilt.status();
    result.encoded.push_back(*std::move(encoded));
    result.rebuilt.push_back(*std::move(rebuilt));
  }
  absl::StatusOr<std::string> digest = TensorsSha256(result.rebuilt);
  if (!digest.ok()) return digest.status();
  result.sha256 = *std::move(digest);
  return result;
}

absl::StatusOr<std::string> TensorsSha256(const std::vector<at::Tensor>& tensors) {
  base::Sha256Hasher hasher;
  try {
    for (const at::Tensor& tensor : tensors) {
      const at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
      hasher.Update(absl::string_view(static_cast<const char*>(cpu.data_ptr()),
                                      static_cast<size_t>(cpu.numel() * cpu.element_size())));
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("hashing tensors: ", e.what_without_backtrace()));
  }
  return hasher.FinishHex();
}

}  // namespace slimfit::performer

// Checkpoint I/O: named tensors in and out of safetensors files.
//
// slimfit's interchange format is safetensors
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of UTF-8 JSON describing each tensor (dtype, shape, byte
// range), then the raw tensor bytes. It is simple to validate, needs no code
// execution to load, and is written by every major framework. Files written by
// Python's `torch.save` are read by torch_state_dict.h.
//
// Example:
//
//   TensorFile file;
//   file.tensors["linear.weight"] = at::randn({4, 3});
//   file.metadata["format"] = "pt";
//   absl::Status written = WriteSafetensors("/ckpt/model.safetensors", file);
//   if (!written.ok()) return written;
//
//   absl::StatusOr<TensorFile> loaded =
//       ReadSafetensors("/ckpt/model.safetensors");
//   if (!loaded.ok()) return loaded.status();
//   at::Tensor w = loaded->tensors.at("linear.weight");
//
// Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL
// (at::kDouble, kFloat, kHalf, kBFloat16, kLong, kInt, kShort, kChar, kByte,
// kBool). Scalars (shape []) and zero-element tensors round-trip.
//
// Ownership: every tensor returned by these functions is a contiguous CPU
// tensor that owns its memory; nothing aliases the input bytes or the file.
// Readers validate the whole file before returning anything, so a malformed or
// truncated file yields an error, never a partially filled TensorFile.
//
// Thread safety: free functions without shared state; thread-compatible. Calls
// on different files may run concurrently. Concurrent calls touching the same
// path need external synchronization (except that WriteSafetensors replaces
// the file atomically, so a concurrent reader sees the old or the new file).
//
// Byte order: tensor bytes are the host's; the implementation
// static_asserts a little-endian host, which is what the format prescribes.

#ifndef SLIMFIT_PERFORMER_SAFETENSORS_H_
#define SLIMFIT_PERFORMER_SAFETENSORS_H_

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit {
namespace performer {

// A set of named tensors plus string metadata: what a checkpoint holds.
struct TensorFile {
  std::map<std::string, at::Tensor> tensors;
  // The safetensors "__metadata__" object (free-form string -> string).
  std::map<std::string, std::string> metadata;
};

// Decodes a complete safetensors file held in `bytes`.
//
// The header is checked exhaustively against the format: valid UTF-8 JSON
// object; no duplicate keys; every tensor entry has a known "dtype" string, a
// "shape" array of non-negative integers and a "data_offsets" pair
// [begin, end] with begin <= end, inside the data section and spanning exactly
// numel * element_size bytes; tensors tile the data section without overlap,
// holes or trailing bytes; "__metadata__", if present, maps strings to
// strings; BOOL bytes are 0 or 1. Unknown fields in a tensor entry are ignored.
//
// Errors: INVALID_ARGUMENT, with a message naming the offending tensor or key
// and the numbers involved, for input shorter than 8 bytes, a header length
// beyond the input or above 100 MiB, a malformed header, or any violated check
// above; RESOURCE_EXHAUSTED if memory for a tensor cannot be allocated.
absl::StatusOr<TensorFile> ParseSafetensors(absl::string_view bytes);

// Reads and decodes the safetensors file at `path`. Tensor bytes are read
// straight into the returned tensors (peak memory ~ the tensors' size, not
// twice it).
//
// Errors: NOT_FOUND if `path` does not exist; PERMISSION_DENIED if it cannot
// be opened for reading; INVALID_ARGUMENT if it is not a regular file or its
// contents fail the checks of ParseSafetensors (including a file shorter than
// its header says, e.g. a truncated download); RESOURCE_EXHAUSTED if memory
// for a tensor cannot be allocated; DATA_LOSS if the file shrinks while being
// read; other I/O failures map from errno. Messages start with `path`.
absl::StatusOr<TensorFile> ReadSafetensors(const std::string& path);

// Encodes `file` as safetensors bytes. Tensors are moved to CPU and made
// contiguous as needed (inputs are not modified); the header lists
// "__metadata__" first (omitted when empty), then tensors in name order with
// contiguous data offsets, as compact JSON padded with spaces to a multiple of
// 8 bytes. The output is deterministic: equal inputs give identical bytes.
//
// Errors: INVALID_ARGUMENT for an undefined or non-strided (sparse, mkldnn)
// tensor, a dtype outside the supported list (e.g. complex, quantized), a
// tensor named "__metadata__", a tensor name or metadata string that is not
// valid UTF-8, or a header above 100 MiB (which no reader would accept);
// INTERNAL if LibTorch fails to copy a tensor to contiguous CPU memory.
absl::StatusOr<std::string> SerializeSafetensors(const TensorFile& file);

// Writes `file` to `path` in the format of SerializeSafetensors, atomically:
// the bytes go to a uniquely named temporary file in the same directory, which
// is fsync'ed and then renamed over `path`; the directory is fsync'ed too. On
// success `path` holds the complete new file (replacing any previous one); on
// failure `path` is untouched and the temporary file is removed. Tensor bytes
// are streamed from the tensors, not staged in one big buffer. The new file
// gets mode 0666 minus the umask.
//
// Errors: those of SerializeSafetensors; NOT_FOUND if the directory of `path`
// does not exist; PERMISSION_DENIED if it is not writable; RESOURCE_EXHAUSTED
// if the disk or quota is full; other I/O failures map from errno
// (base/files.h). Messages name the path.
struct SafetensorsWriteOptions {
  // Called once each tensor's bytes are written, with the tensor written (the one of `file`, or
  // its contiguous CPU copy): e.g. to take a file-backed tensor's pages out of the resident set
  // (file_backed_tensors.h).
  std::function<void(const at::Tensor&)> after_each_tensor;
};
absl::Status WriteSafetensors(const std::string& path, const TensorFile& file,
                              const SafetensorsWriteOptions& options = {});

}  // namespace performer
}  // namespace slimfit

#endif  // SLIMFIT_PERFORMER_SAFETENSORS_H_

// Tensors whose memory is a file's (base/file_backed_memory.h): the coordinator's optimizer moments
// and spot-checked shards' results waiting for their check, where it is told to offload them
// (slimfit-coordinator --offload_dir). Such a tensor is
// an ordinary contiguous CPU tensor to every reader and writer; ReleaseResidentPages takes its pages
// out of the process's resident set after a pass over it (they stay in the page cache or the file).
// The file lives as long as the tensor's storage: the last tensor or view of it unmaps it.
//
// Thread safety: as for any tensor; ReleaseResidentPages may race with readers and writers
// harmlessly (they fault the pages back).
#ifndef SLIMFIT_PERFORMER_FILE_BACKED_TENSORS_H_
#define SLIMFIT_PERFORMER_FILE_BACKED_TENSORS_H_

#include <ATen/ATen.h>

#include <string>

#include "absl/status/statusor.h"

namespace slimfit::performer {

// A contiguous CPU tensor of zeros shaped and typed like `like`, in an unnamed file in `directory`.
// Errors: those of base::FileBackedMemory::Create (NOT_FOUND for a missing directory,
// RESOURCE_EXHAUSTED for a full disk, ...), naming the directory.
absl::StatusOr<at::Tensor> FileBackedZerosLike(const std::string& directory, const at::Tensor& like);
// The same by shape and dtype.
absl::StatusOr<at::Tensor> FileBackedZeros(const std::string& directory, at::IntArrayRef shape,
                                           at::ScalarType dtype);

// Whether `tensor`'s memory is a file's (made by FileBackedZerosLike or FileBackedZeros).
bool IsFileBacked(const at::Tensor& tensor);

// Drops the pages of `tensor`'s whole storage from the resident set when it is file-backed; nothing
// otherwise (anonymous memory is never touched).
void ReleaseResidentPages(const at::Tensor& tensor);

// Before a pass that writes all of `tensor`'s storage: its pages mapped in one call when it is
// file-backed (base::FileBackedMemory::PrepareForWriting); nothing otherwise.
void PrepareForWriting(const at::Tensor& tensor);

// Bytes of `tensor`'s storage resident in this process: base::FileBackedMemory::ResidentBytes for
// a file-backed tensor, -1 otherwise. For tests and benchmarks.
int64_t ResidentBytes(const at::Tensor& tensor);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_FILE_BACKED_TENSORS_H_

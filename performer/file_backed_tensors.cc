#include "performer/file_backed_tensors.h"

#include <memory>
#include <utility>

#include "base/file_backed_memory.h"

namespace slimfit::performer {
namespace {

void DeleteFileBackedMemory(void* context) { delete static_cast<base::FileBackedMemory*>(context); }

// The mapping behind `tensor`, recognised by the deleter its storage was made with; null otherwise.
const base::FileBackedMemory* MemoryOf(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return nullptr;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get_deleter() != &DeleteFileBackedMemory) return nullptr;
  return static_cast<const base::FileBackedMemory*>(data.get_context());
}

}  // namespace

absl::StatusOr<at::Tensor> FileBackedZerosLike(const std::string& directory, const at::Tensor& like) {
  return FileBackedZeros(directory, like.sizes(), like.scalar_type());
}

absl::StatusOr<at::Tensor> FileBackedZeros(const std::string& directory, at::IntArrayRef shape,
                                           at::ScalarType dtype) {
  int64_t elements = 1;
  for (const int64_t extent : shape) elements *= extent;
  const int64_t bytes = std::max<int64_t>(1, elements * static_cast<int64_t>(c10::elementSize(dtype)));
  absl::StatusOr<std::unique_ptr<base::FileBackedMemory>> memory =
      base::FileBackedMemory::Create(directory, bytes);
  if (!memory.ok()) return memory.status();
  void* data = (*memory)->data();
  c10::DataPtr pointer(data, memory->release(), &DeleteFileBackedMemory, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(bytes), std::move(pointer),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype))
      .set_(std::move(storage), /*storage_offset=*/0, shape);
}

bool IsFileBacked(const at::Tensor& tensor) { return MemoryOf(tensor) != nullptr; }

void ReleaseResidentPages(const at::Tensor& tensor) {
  if (const base::FileBackedMemory* memory = MemoryOf(tensor)) memory->ReleaseResidentPages();
}

void PrepareForWriting(const at::Tensor& tensor) {
  if (const base::FileBackedMemory* memory = MemoryOf(tensor)) memory->PrepareForWriting();
}

int64_t ResidentBytes(const at::Tensor& tensor) {
  const base::FileBackedMemory* memory = MemoryOf(tensor);
  return memory != nullptr ? memory->ResidentBytes() : -1;
}

}  // namespace slimfit::performer

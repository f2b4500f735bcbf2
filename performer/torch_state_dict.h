// Reading checkpoints written by Python's torch.save. slimfit writes safetensors (safetensors.h);
// this reader lets people bring a PyTorch state dict without converting it first.
//
// Example:
//   absl::StatusOr<std::map<std::string, at::Tensor>> state = ReadTorchStateDict("model.pt");
//   if (!state.ok()) return state.status();  // the message says how to re-save an unreadable file
//
// Thread safety: a free function without shared state; calls on different files may run
// concurrently.
#ifndef SLIMFIT_PERFORMER_TORCH_STATE_DICT_H_
#define SLIMFIT_PERFORMER_TORCH_STATE_DICT_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace slimfit::performer {

// Reads a state dict written by Python's `torch.save(obj, path)` in the
// default zip format, where `obj` is a dict mapping strings to tensors, e.g.
// `torch.save(dict(model.state_dict()), path)`. A training checkpoint that
// nests such a dict under "state_dict" or "model" (e.g.
// `{"state_dict": {...}, "epoch": 3}`) is accepted too: the nested dict is
// returned and the other keys are ignored. Tensors are CPU tensors that own
// their memory; tensors that shared storage in Python may share it here. The
// whole file is read into memory first (LibTorch's unpickler needs it), so
// peak memory is about twice the tensors' size; prefer safetensors for large
// checkpoints.
//
// Tensors saved from another device are restored on the CPU. Before LibTorch
// reads anything, the zip container must have the layout torch.save writes
// (records stored uncompressed, each below 4 GiB, under one folder, a version
// record LibTorch reads: see torch_archive.h); after unpickling, every tensor
// must lie inside its storage and every storage inside the bytes stored for it.
//
// Errors: NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT (not a regular
// file) naming the path when it cannot be read;
// INVALID_ARGUMENT when the file holds a collections.OrderedDict (what a raw
// `model.state_dict()` is; LibTorch 1.13 cannot unpickle it), uses the legacy
// non-zip format (`_use_new_zipfile_serialization=False`), is not a torch.save
// zip archive as described above, holds something other than a dict, has a
// non-string key or a non-tensor value, or a tensor reaching outside its data
// (the message names the key). Messages start with `path` and say how to
// re-save the file where that is the fix.
absl::StatusOr<std::map<std::string, at::Tensor>> ReadTorchStateDict(const std::string& path);

}  // namespace slimfit::performer

#endif  // SLIMFIT_PERFORMER_TORCH_STATE_DICT_H_

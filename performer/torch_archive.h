// Internal to //performer:torch_state_dict: the zip container and the pickle of a torch.save file,
// checked before LibTorch's reader (caffe2::serialize::PyTorchStreamReader, with miniz underneath)
// and unpickler see them.
//
// Why: when that reader's constructor fails after miniz opened the archive (no file in it, a first
// file outside a folder, no readable "version" record) it throws without closing miniz, leaking the
// archive's directory; a record's size comes from the directory, so a forged size makes LibTorch
// allocate it; and the unpickler allocates a string of whatever length an opcode announces, or a
// memo table up to whatever index it names, before reading any of it. Every archive ReadTorchStateDict hands
// to LibTorch therefore has the layout torch.save writes, which these checks pin down (a subset of what miniz
// accepts, so LibTorch reads the same records):
//   - the end-of-central-directory record closes the file (no archive comment); a zip64 end record,
//     located as miniz locates it, is consistent with it; one disk;
//   - 1 .. 65535 central-directory entries inside the file, each a record stored uncompressed
//     (torch.save never compresses), not encrypted, not a directory, below 4 GiB, whose local
//     header and data lie inside the file;
//   - names of 1 .. 4096 bytes, all under one top-level folder (the archive name), no two equal
//     ignoring case (miniz looks names up case-insensitively);
//   - "<archive>/version" holds a decimal version LibTorch reads, with the CRC-32 its entry claims;
//   - "<archive>/data.pkl" is a sequence of binary pickle opcodes ending in STOP whose length
//     arguments fit in the bytes that follow and whose memo indices are below its size.
//
// Thread safety: a pure function.
#ifndef SLIMFIT_PERFORMER_TORCH_ARCHIVE_H_
#define SLIMFIT_PERFORMER_TORCH_ARCHIVE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace slimfit::performer::torch_archive_internal {

struct TorchArchive {
  std::string name;  // the top-level folder ("archive", or the file's base name)
  uint64_t version = 0;
  // Record sizes in bytes by name within the folder ("data.pkl", "data/0", "version").
  std::map<std::string, uint64_t> record_bytes;
};

// INVALID_ARGUMENT saying which check failed (without a path; the caller adds it).
absl::StatusOr<TorchArchive> CheckTorchArchive(absl::string_view bytes);

}  // namespace slimfit::performer::torch_archive_internal

#endif  // SLIMFIT_PERFORMER_TORCH_ARCHIVE_H_

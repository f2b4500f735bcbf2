#include "performer/torch_archive.h"

#include <caffe2/serialize/versions.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace slimfit::performer::torch_archive_internal {
namespace {

// Zip record layouts (APPNOTE.TXT), as miniz reads them.
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint64_t kEndBytes = 22;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint64_t kZip64EndBytes = 56;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint64_t kCentralBytes = 46;
constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint64_t kLocalBytes = 30;
constexpr uint64_t kMaxNameBytes = 4096;

template <typename... Args>
absl::Status Invalid(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("not a torch.save zip archive: ", args...));
}

uint64_t Little(absl::string_view bytes, uint64_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[offset + i]);
  return value;
}

struct Entry {
  std::string name;
  uint64_t crc32 = 0;
  uint64_t size = 0;
  uint64_t data_offset = 0;
};

struct Directory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
};

// The central directory's place, read from the end records as miniz reads them.
absl::StatusOr<Directory> LocateDirectory(absl::string_view bytes) {
  const uint64_t size = bytes.size();
  if (size < kEndBytes) return Invalid(size, " bytes, too short for a zip archive");
  const uint64_t end = size - kEndBytes;
  if (Little(bytes, end, 4) != kEndSignature) {
    return Invalid("no end-of-central-directory record at the end of the file (or an archive comment)");
  }
  Directory directory;
  uint64_t entries_on_disk = Little(bytes, end + 8, 2);
  uint64_t this_disk = Little(bytes, end + 4, 2);
  uint64_t directory_disk = Little(bytes, end + 6, 2);
  directory.entries = Little(bytes, end + 10, 2);
  directory.size = Little(bytes, end + 12, 4);
  directory.offset = Little(bytes, end + 16, 4);
  if (end >= kZip64LocatorBytes + kZip64EndBytes &&
      Little(bytes, end - kZip64LocatorBytes, 4) == kZip64LocatorSignature) {
    const uint64_t locator = end - kZip64LocatorBytes;
    const uint64_t zip64_end = Little(bytes, locator + 8, 8);
    if (zip64_end > size - kZip64EndBytes) return Invalid("zip64 end record outside the file");
    if (Little(bytes, zip64_end, 4) == kZip64EndSignature) {
      if (Little(bytes, locator + 16, 4) != 1) return Invalid("more than one disk");
      if (Little(bytes, zip64_end + 4, 8) < kZip64EndBytes - 12) return Invalid("zip64 end record too short");
      directory.entries = Little(bytes, zip64_end + 32, 8);
      entries_on_disk = Little(bytes, zip64_end + 24, 8);
      directory.size = Little(bytes, zip64_end + 40, 8);
      this_disk = Little(bytes, zip64_end + 16, 4);
      directory_disk = Little(bytes, zip64_end + 20, 4);
      directory.offset = Little(bytes, zip64_end + 48, 8);
    }
  }
  if (directory.entries != entries_on_disk || this_disk != 0 || directory_disk != 0) {
    return Invalid("archives on several disks are not supported");
  }
  if (directory.entries == 0) return Invalid("the archive holds no file");
  if (directory.entries > 65535) return Invalid(directory.entries, " files; at most 65535");
  if (directory.size > size || directory.offset > size - directory.size ||
      directory.size < directory.entries * kCentralBytes) {
    return Invalid("central directory of ", directory.size, " bytes at ", directory.offset,
                   " does not fit the ", size, "-byte file");
  }
  return directory;
}

// One central-directory entry at `*offset` (advanced past it), checked against its local header.
absl::StatusOr<Entry> ReadEntry(absl::string_view bytes, const Directory& directory, uint64_t* offset) {
  const uint64_t directory_end = directory.offset + directory.size;
  const uint64_t at = *offset;
  if (directory_end - at < kCentralBytes || Little(bytes, at, 4) != kCentralSignature) {
    return Invalid("corrupt central directory entry at byte ", at);
  }
  const uint64_t flags = Little(bytes, at + 8, 2);
  const uint64_t method = Little(bytes, at + 10, 2);
  Entry entry;
  entry.crc32 = Little(bytes, at + 16, 4);
  const uint64_t compressed = Little(bytes, at + 20, 4);
  entry.size = Little(bytes, at + 24, 4);
  const uint64_t name_bytes = Little(bytes, at + 28, 2);
  const uint64_t extra_bytes = Little(bytes, at + 30, 2);
  const uint64_t comment_bytes = Little(bytes, at + 32, 2);
  const uint64_t disk = Little(bytes, at + 34, 2);
  const uint64_t external_attributes = Little(bytes, at + 38, 4);
  const uint64_t local = Little(bytes, at + 42, 4);
  const uint64_t header_bytes = kCentralBytes + name_bytes + extra_bytes + comment_bytes;
  if (header_bytes > directory_end - at)
    return Invalid("central directory entry at byte ", at, " runs past it");
  entry.name = std::string(bytes.substr(at + kCentralBytes, name_bytes));
  if (name_bytes == 0 || name_bytes > kMaxNameBytes) return Invalid("a file name of ", name_bytes, " bytes");
  // Encrypted, strongly encrypted or a patch: miniz refuses to extract it.
  if ((flags & (0x1 | 0x20 | 0x40)) != 0) return Invalid("'", entry.name, "' is encrypted or a patch");
  // miniz takes an entry for a directory (and extracts nothing) by its name or its DOS attribute.
  if (entry.name.back() == '/' || (external_attributes & 0x10) != 0) {
    return Invalid("'", entry.name, "' is a directory");
  }
  if (disk != 0) return Invalid("archives on several disks are not supported");
  if (compressed == 0xffffffff || entry.size == 0xffffffff || local == 0xffffffff) {
    return Invalid("'", entry.name, "' needs zip64 sizes (4 GiB or more)");
  }
  if (method != 0 || compressed != entry.size) {
    return Invalid("'", entry.name, "' is compressed (torch.save stores records uncompressed)");
  }
  const uint64_t size = bytes.size();
  if (local > size || size - local < kLocalBytes || Little(bytes, local, 4) != kLocalSignature) {
    return Invalid("'", entry.name, "' has no local header at byte ", local);
  }
  entry.data_offset = local + kLocalBytes + Little(bytes, local + 26, 2) + Little(bytes, local + 28, 2);
  if (entry.data_offset > size || entry.size > size - entry.data_offset) {
    return Invalid("'", entry.name, "' (", entry.size, " bytes at byte ", entry.data_offset,
                   ") runs past the end of the file");
  }
  *offset = at + header_bytes;
  return entry;
}

// How a pickle opcode reads its argument (pickletools' argument descriptors, binary ones only).
enum class Argument {
  kNone,
  kFixed1,
  kFixed2,
  kFixed4,
  kFixed8,
  kLength1,
  kLength4,
  kLength8,
  kLine,
  kTwoLines
};

// What an opcode does to the unpickler's stack (pickletools' stack_before and stack_after).
enum class Effect {
  kPlain,   // pops `pops` items above the top mark, pushes `pushes`
  kToMark,  // pops every item above the top mark and the mark, then `pops` more; pushes `pushes`
  kMark,    // pushes a mark
  kMemo,    // stores the top item (above the top mark) in the memo
};

struct Opcode {
  Argument argument = Argument::kNone;
  Effect effect = Effect::kPlain;
  int pops = 0;
  int pushes = 0;
};

// The opcodes a torch.save pickle may hold; false for the others (text-argument opcodes,
// extension registry and out-of-band buffers: torch.save writes none of them).
bool Describe(unsigned char op, Opcode* out) {
  using A = Argument;
  using E = Effect;
  auto set = [out](A argument, E effect, int pops, int pushes) {
    *out = Opcode{argument, effect, pops, pushes};
    return true;
  };
  switch (op) {
    // Values: push one.
    case 'N':
    case 0x88:
    case 0x89:
    case ']':
    case ')':
    case '}':
    case 0x8f:
      return set(A::kNone, E::kPlain, 0, 1);
    case 'K':
      return set(A::kFixed1, E::kPlain, 0, 1);
    case 'M':
      return set(A::kFixed2, E::kPlain, 0, 1);
    case 'J':
      return set(A::kFixed4, E::kPlain, 0, 1);
    case 'G':
      return set(A::kFixed8, E::kPlain, 0, 1);
    case 0x8a:
    case 'U':
    case 'C':
    case 0x8c:
      return set(A::kLength1, E::kPlain, 0, 1);
    case 0x8b:
    case 'T':
    case 'B':
    case 'X':
      return set(A::kLength4, E::kPlain, 0, 1);
    case 0x8e:
    case 0x8d:
    case 0x96:
      return set(A::kLength8, E::kPlain, 0, 1);
    case 'c':
      return set(A::kTwoLines, E::kPlain, 0, 1);  // GLOBAL
    case 'P':
      return set(A::kLine, E::kPlain, 0, 1);  // PERSID
    case 'h':
      return set(A::kFixed1, E::kPlain, 0, 1);  // BINGET
    case 'j':
      return set(A::kFixed4, E::kPlain, 0, 1);  // LONG_BINGET
    // Memo stores.
    case 'q':
      return set(A::kFixed1, E::kMemo, 0, 0);  // BINPUT
    case 'r':
      return set(A::kFixed4, E::kMemo, 0, 0);  // LONG_BINPUT
    case 0x94:
      return set(A::kNone, E::kMemo, 0, 0);  // MEMOIZE
    // Stack manipulation and building.
    case '(':
      return set(A::kNone, E::kMark, 0, 0);
    case '0':
      return set(A::kNone, E::kPlain, 1, 0);  // POP
    case '2':
      return set(A::kNone, E::kPlain, 1, 2);  // DUP
    case '1':
      return set(A::kNone, E::kToMark, 0, 0);  // POP_MARK
    case 'a':
      return set(A::kNone, E::kPlain, 2, 1);  // APPEND
    case 'e':
    case 'u':
    case 0x90:
      return set(A::kNone, E::kToMark, 1, 1);  // APPENDS, SETITEMS, ADDITEMS
    case 'l':
    case 't':
    case 'd':
    case 0x91:
      return set(A::kNone, E::kToMark, 0, 1);  // LIST, TUPLE, DICT, FROZENSET
    case 0x85:
      return set(A::kNone, E::kPlain, 1, 1);  // TUPLE1
    case 0x86:
      return set(A::kNone, E::kPlain, 2, 1);  // TUPLE2
    case 0x87:
      return set(A::kNone, E::kPlain, 3, 1);  // TUPLE3
    case 's':
      return set(A::kNone, E::kPlain, 3, 1);  // SETITEM
    case 0x93:
    case 'R':
    case 'b':
    case 0x81:
      return set(A::kNone, E::kPlain, 2, 1);  // STACK_GLOBAL, REDUCE, BUILD, NEWOBJ
    case 0x92:
      return set(A::kNone, E::kPlain, 3, 1);  // NEWOBJ_EX
    case 'Q':
      return set(A::kNone, E::kPlain, 1, 1);  // BINPERSID
    case 0x80:
      return set(A::kFixed1, E::kPlain, 0, 0);  // PROTO
    case 0x95:
      return set(A::kFixed8, E::kPlain, 0, 0);  // FRAME
    case '.':
      return set(A::kNone, E::kPlain, 1, 0);  // STOP
    default:
      return false;
  }
}

// Walks the opcodes of a pickle up to STOP as pickletools.dis does, without building anything:
// every length-prefixed argument must fit in the bytes that follow, every memo index must be below
// the pickle's size, and no opcode may take more stack items than there are above the top mark
// (or a mark that is not there). LibTorch's unpickler allocates a string of the length an opcode
// announces, or a memo table up to the index, before reading anything, and pops its stack without
// checking its depth (BUILD on an empty stack crashed it).
absl::Status CheckPickle(absl::string_view pickle) {
  const uint64_t size = pickle.size();
  std::vector<uint64_t> marks;  // stack depth at each open mark
  uint64_t depth = 0;           // items on the stack, marks not counted
  uint64_t at = 0;
  while (at < size) {
    const auto op = static_cast<unsigned char>(pickle[at]);
    const uint64_t opcode_at = at++;
    Opcode opcode;
    if (!Describe(op, &opcode)) {
      return Invalid("data.pkl has unsupported pickle opcode 0x", absl::Hex(op, absl::kZeroPad2), " at byte ",
                     opcode_at);
    }
    uint64_t length = 0;
    switch (opcode.argument) {
      case Argument::kNone:
        break;
      case Argument::kFixed1:
        length = 1;
        break;
      case Argument::kFixed2:
        length = 2;
        break;
      case Argument::kFixed4:
        length = 4;
        break;
      case Argument::kFixed8:
        length = 8;
        break;
      case Argument::kLength1:
      case Argument::kLength4:
      case Argument::kLength8: {
        const int width = opcode.argument == Argument::kLength1   ? 1
                          : opcode.argument == Argument::kLength4 ? 4
                                                                  : 8;
        if (size - at < static_cast<uint64_t>(width)) {
          return Invalid("data.pkl ends inside opcode 0x", absl::Hex(op, absl::kZeroPad2));
        }
        length = Little(pickle, at, width);
        at += width;
        break;
      }
      case Argument::kLine:
      case Argument::kTwoLines:
        for (int line = 0; line < (opcode.argument == Argument::kLine ? 1 : 2); ++line) {
          const size_t newline = pickle.find('\n', at);
          if (newline == absl::string_view::npos) {
            return Invalid("data.pkl ends inside opcode 0x", absl::Hex(op, absl::kZeroPad2));
          }
          at = newline + 1;
        }
        break;
    }
    if (length > size - at) {
      return Invalid("data.pkl opcode 0x", absl::Hex(op, absl::kZeroPad2), " at byte ", opcode_at, " has a ",
                     length, "-byte argument; ", size - at, " bytes follow");
    }
    if ((op == 'j' || op == 'r') && Little(pickle, at, 4) >= size) {
      return Invalid("data.pkl memo index beyond its size at byte ", opcode_at);
    }
    at += length;

    const uint64_t above_mark = depth - (marks.empty() ? 0 : marks.back());
    auto underflow = [&] {
      return Invalid("data.pkl opcode 0x", absl::Hex(op, absl::kZeroPad2), " at byte ", opcode_at,
                     " takes more from the unpickler's stack than there is");
    };
    switch (opcode.effect) {
      case Effect::kMark:
        marks.push_back(depth);
        break;
      case Effect::kMemo:
        if (above_mark < 1) return underflow();
        break;
      case Effect::kPlain:
        if (above_mark < static_cast<uint64_t>(opcode.pops)) return underflow();
        depth = depth - opcode.pops + opcode.pushes;
        break;
      case Effect::kToMark: {
        if (marks.empty()) return underflow();
        depth = marks.back();
        marks.pop_back();
        const uint64_t below = depth - (marks.empty() ? 0 : marks.back());
        if (below < static_cast<uint64_t>(opcode.pops)) return underflow();
        depth = depth - opcode.pops + opcode.pushes;
        break;
      }
    }
    if (op == '.') return absl::OkStatus();
  }
  return Invalid("data.pkl has no STOP opcode");
}

// The version record's value: decimal digits and an optional newline, in LibTorch's range.
absl::StatusOr<uint64_t> ParseVersion(absl::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (text.empty() || text.size() > 4 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return Invalid("the version record is not a number");
  }
  uint64_t version = 0;
  for (char c : text) version = version * 10 + static_cast<uint64_t>(c - '0');
  if (version < caffe2::serialize::kMinSupportedFileFormatVersion ||
      version > caffe2::serialize::kMaxSupportedFileFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat("torch.save file format version ", version,
                                                   " is outside the versions this LibTorch reads (",
                                                   caffe2::serialize::kMinSupportedFileFormatVersion, "..",
                                                   caffe2::serialize::kMaxSupportedFileFormatVersion, ")"));
  }
  return version;
}

}  // namespace

absl::StatusOr<TorchArchive> CheckTorchArchive(absl::string_view bytes) {
  absl::StatusOr<Directory> directory = LocateDirectory(bytes);
  if (!directory.ok()) return directory.status();
  TorchArchive archive;
  std::set<std::string> folded;  // names in lower case: miniz finds names case-insensitively
  const Entry* version = nullptr;
  const Entry* pickle = nullptr;
  std::vector<Entry> entries;
  entries.reserve(directory->entries);
  uint64_t offset = directory->offset;
  for (uint64_t i = 0; i < directory->entries; ++i) {
    absl::StatusOr<Entry> entry = ReadEntry(bytes, *directory, &offset);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }
  for (const Entry& entry : entries) {
    if (archive.name.empty()) {
      const size_t slash = entry.name.find('/');
      if (slash == std::string::npos || slash == 0) {
        return Invalid("the first file '", entry.name, "' is not in a folder");
      }
      archive.name = entry.name.substr(0, slash);
    }
    if (entry.name.size() <= archive.name.size() + 1 ||
        entry.name.compare(0, archive.name.size() + 1, archive.name + "/") != 0) {
      return Invalid("'", entry.name, "' is outside the archive's folder '", archive.name, "'");
    }
    if (!folded.insert(absl::AsciiStrToLower(entry.name)).second) {
      return Invalid("two files are named '", entry.name, "' (ignoring case)");
    }
    const std::string record = entry.name.substr(archive.name.size() + 1);
    archive.record_bytes[record] = entry.size;
    if (record == "version") version = &entry;
    if (record == "data.pkl") pickle = &entry;
  }
  if (version == nullptr) return Invalid("no version record");
  const absl::string_view text = bytes.substr(version->data_offset, version->size);
  if (crc32(0, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())) !=
      version->crc32) {
    return Invalid("the version record's CRC-32 does not match");
  }
  absl::StatusOr<uint64_t> number = ParseVersion(text);
  if (!number.ok()) return number.status();
  archive.version = *number;
  if (pickle == nullptr) return Invalid("no data.pkl record");
  if (absl::Status valid = CheckPickle(bytes.substr(pickle->data_offset, pickle->size)); !valid.ok())
    return valid;
  return archive;
}

}  // namespace slimfit::performer::torch_archive_internal

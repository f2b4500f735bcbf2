#!/usr/bin/python3
"""Writes the fixtures that performer/tensor_file_test.cc reads.

Run with Debian's Python, which has torch 1.13 (the `python3` on PATH may not):

    /usr/bin/python3 performer/testdata/make_tensor_file_testdata.py

The safetensors file is written by hand with struct + json, independently of the
C++ writer, so the test can check byte-exact compatibility. Layout (see
https://github.com/huggingface/safetensors): u64 little-endian header length N,
N bytes of compact UTF-8 JSON ("__metadata__" first, then tensors sorted by
name, each {"dtype", "shape", "data_offsets"}) padded with spaces to a multiple
of 8, then the tensors' bytes back to back in name order. All values are
deterministic, so rerunning the script reproduces the files.
"""

import collections
import json
import os
import struct
import zipfile

import torch

OUT_DIR = os.path.dirname(os.path.abspath(__file__))

DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def write_safetensors(path, tensors, metadata):
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        # Reinterpret as bytes; numpy has no bfloat16, so go through torch.
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": DTYPE_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for chunk in chunks:
            f.write(chunk)


def reference_tensors():
    """Must match ReferenceTensors() in tensor_file_test.cc."""
    return {
        "f64": torch.tensor([1.5, -2.25, 1e300], dtype=torch.float64),
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4 - 0.5,
        "f16": torch.tensor([[0.5, -1.0], [65504.0, 2.0 ** -24]], dtype=torch.float16),
        "bf16": torch.tensor([1.0, -3.0, 0.0078125], dtype=torch.bfloat16),
        "i64": torch.tensor([-(2 ** 63), 2 ** 63 - 1, 7], dtype=torch.int64),
        "i32": torch.tensor([[-5], [2 ** 31 - 1]], dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True], dtype=torch.bool),
        "scalar": torch.tensor(3.25, dtype=torch.float32),
        "empty": torch.zeros(2, 0, 3, dtype=torch.float32),
    }


def state_dict():
    """Must match the expectations of the ReadTorchStateDict tests."""
    return {
        "linear.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "linear.bias": torch.tensor([0.5, -0.5], dtype=torch.float32),
        "steps": torch.tensor(42, dtype=torch.int64),
    }


def rewrite_archive(source, target, folder="archive", patches=(), version=None,
                    compression=zipfile.ZIP_STORED, version_attributes=None, pickle=None):
    """Copies the torch.save zip `source` to `target` with its records under `folder`
    ("" for none), data.pkl replaced by `pickle` and patched at (offset, byte) pairs, and another
    version record:
    the malformed archives ReadTorchStateDict must refuse."""
    with zipfile.ZipFile(source) as zin:
        records = {}
        for info in zin.infolist():
            records[info.filename.split("/", 1)[1]] = zin.read(info)
    data = bytearray(records["data.pkl"] if pickle is None else pickle)
    for offset, value in patches:
        data[offset] = value
    records["data.pkl"] = bytes(data)
    if version is not None:
        records["version"] = version
    prefix = folder + "/" if folder else ""
    with zipfile.ZipFile(target, "w", compression=compression) as zout:
        for name in ["data.pkl"] + sorted(n for n in records if n not in ("data.pkl", "version")) + ["version"]:
            info = zipfile.ZipInfo(prefix + name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = compression
            if name == "version" and version_attributes is not None:
                info.external_attr = version_attributes
            zout.writestr(info, records[name])


def write_malformed_state_dicts():
    """A well-formed archive from another zip writer, and archives found malformed by fuzzing (fuzz/torch_state_dict_fuzzer.cc); offsets are
    those of state_dict_plain.pt's data.pkl (pickletools.dis shows them)."""
    plain = os.path.join(OUT_DIR, "state_dict_plain.pt")
    out = lambda name: os.path.join(OUT_DIR, name)
    rewrite_archive(plain, out("state_dict_rezipped.pt"))  # well formed
    # linear.weight's storage claims 200 floats; 24 bytes are stored.
    rewrite_archive(plain, out("state_dict_storage_overrun.pt"), patches=[(118, 200)])
    # linear.weight (2 x 3, strides 3, 1) starts at element 5 of its 6-element storage.
    rewrite_archive(plain, out("state_dict_view_overrun.pt"), patches=[(124, 5)])
    # No top-level folder: LibTorch's reader throws after opening the zip (and leaked it).
    rewrite_archive(plain, out("state_dict_no_folder.pt"), folder="")
    rewrite_archive(plain, out("state_dict_deflated.pt"), compression=zipfile.ZIP_DEFLATED)
    # The key 'linear.weight' (BINUNICODE at byte 6) announced as 2 GiB long: LibTorch's unpickler
    # allocated that much before reading it.
    rewrite_archive(plain, out("state_dict_long_string.pt"), patches=[(10, 0x7f)])
    # PROTO 2, BUILD, STOP: BUILD pops two items off an empty stack (LibTorch's unpickler crashed).
    rewrite_archive(plain, out("state_dict_stack_underflow.pt"), pickle=b"\x80\x02b.")
    rewrite_archive(plain, out("state_dict_version_99.pt"), version=b"99\n")
    # The version record marked a directory (DOS attribute 0x10): miniz extracted nothing from it
    # and LibTorch's reader leaked the archive.
    rewrite_archive(plain, out("state_dict_version_directory.pt"), version_attributes=0x10)


def main():
    write_safetensors(
        os.path.join(OUT_DIR, "reference.safetensors"),
        reference_tensors(),
        {"format": "pt", "note": "caf\u00e9 \"quoted\""},
    )
    sd = state_dict()
    torch.save(sd, os.path.join(OUT_DIR, "state_dict_plain.pt"))
    torch.save({"state_dict": sd, "epoch": 3}, os.path.join(OUT_DIR, "state_dict_nested.pt"))
    torch.save(collections.OrderedDict(sd), os.path.join(OUT_DIR, "state_dict_ordered.pt"))
    torch.save(sd, os.path.join(OUT_DIR, "state_dict_legacy.pt"),
               _use_new_zipfile_serialization=False)
    torch.save({"linear.weight": sd["linear.weight"], "lr": 0.1},
               os.path.join(OUT_DIR, "state_dict_non_tensor.pt"))
    write_malformed_state_dicts()


if __name__ == "__main__":
    main()

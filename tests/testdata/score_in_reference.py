#!/usr/bin/python3
"""Loads a model file slimfit wrote into the independent PyTorch implementation of the SLiM
Performer (make_performer_fixture.py: the reference implementation's parameter names, quadratic
masked attention in float64) and scores a token sequence with it.

    /usr/bin/python3 tests/testdata/score_in_reference.py MODEL.safetensors 1,5,9,...

The model's shape comes from the file's metadata (vocab, d_model, layers, heads, d_ff, feature,
layernorm). Prints one JSON object: {"loss_sum": ..., "predicted_tokens": ...} for the sequence as
one document. Exits 1 with a one-line reason when the file's tensors are not exactly the reference
model's parameters (names, shapes) or cannot be read. Deterministic feature maps only (not favor+).
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_performer_fixture as reference  # noqa: E402

DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2"}


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, h in header.items():
        if h["dtype"] not in DTYPES:
            raise ValueError(f"{name}: dtype {h['dtype']} is not a parameter dtype")
        b, e = h["data_offsets"]
        array = np.frombuffer(buf[8 + n + b:8 + n + e], dtype=DTYPES[h["dtype"]]).reshape(h["shape"])
        tensors[name] = torch.from_numpy(array.astype("<f8"))
    return tensors, meta


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: score_in_reference.py MODEL.safetensors TOKENS")
    tensors, meta = read_safetensors(sys.argv[1])
    reference.VOCAB = int(meta["vocab"])
    reference.D_MODEL = int(meta["d_model"])
    reference.LAYERS = int(meta["layers"])
    reference.HEADS = int(meta["heads"])
    reference.D_FF = int(meta["d_ff"])
    if meta["feature"] == "favor+":
        sys.exit("favor+ models need their feature draw; score a deterministic feature map")

    expected = reference.init_params(torch.Generator().manual_seed(0), 1.0)
    if set(expected) != set(tensors):
        sys.exit(f"parameter names differ from the reference model's: missing {sorted(set(expected) - set(tensors))},"
                 f" unexpected {sorted(set(tensors) - set(expected))}")
    for name, value in expected.items():
        if tuple(value.shape) != tuple(tensors[name].shape):
            sys.exit(f"{name}: shape {tuple(tensors[name].shape)}, the reference model's is {tuple(value.shape)}")

    tokens = torch.tensor([int(t) for t in sys.argv[2].split(",")], dtype=torch.long)
    with torch.no_grad():
        loss_sum, count = reference.forward(tensors, (meta["feature"], 1, meta["layernorm"]), tokens, [0], None)
    print(json.dumps({"loss_sum": float(loss_sum), "predicted_tokens": count}))


if __name__ == "__main__":
    main()

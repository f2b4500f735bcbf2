"""Writes tests/testdata/performer_fixture_sqr_post_state_dict.pt: the parameters of the sqr_post
fixture as PyTorch saves them with torch.save(dict(model.state_dict()), path), so the C++ import of
a state_dict is tested against a real torch.save file.

Run with Debian's Python (it has torch):
    /usr/bin/python3 tests/testdata/make_state_dict_fixture.py --out_dir tests/testdata
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_performer_fixture import read_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    source = os.path.join(args.out_dir, "performer_fixture_sqr_post.safetensors")
    loaded = read_safetensors(source)
    tensors = loaded[0] if isinstance(loaded, tuple) else loaded
    state = {name: torch.from_numpy(t.copy()) for name, t in tensors.items()
             if not name.startswith(("grad.", "fixture.", "favor."))}
    out = os.path.join(args.out_dir, "performer_fixture_sqr_post_state_dict.pt")
    torch.save(state, out)
    print(f"wrote {out} with {len(state)} tensors")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Cross-implementation test fixtures for slimfit's causal Performer (linear attention) LM.

This is an independent, deliberately simple float64 PyTorch implementation of the
SLiM Performer language model (google-research `performer/models/slim_performer`),
generalised to packed streams of several documents.  For each of a few small
configurations it draws deterministic parameters and tokens, computes the mean
next-token cross-entropy loss and its exact gradient with torch autograd, and writes
everything to `performer_fixture_<name>.safetensors` for the C++ engine to reproduce.

Attention is computed in the QUADRATIC masked form (explicit L x L same-document causal
weights), not with prefix sums, so it is independent of the engine's algorithms.  Each run
also self-checks: (a) finite differences, (b) packed loss == token-weighted per-document
losses, (c) a prefix-sum (torch.cumsum) formulation gives the same loss and gradient.

Re-run (needs Debian's Python, which has torch; no other packages):
    /usr/bin/python3 tests/testdata/make_performer_fixture.py --out_dir tests/testdata
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

VOCAB, D_MODEL, LAYERS, HEADS, D_FF = 48, 16, 2, 2, 32
DOC_LENGTHS = [17, 9, 14]
# name: (feature, feature multiplier, layernorm placement, seed, scale applied to q/k weights).
# The q/k scales make attention clearly non-uniform (mean normalised entropy ~0.9) while keeping
# every denominator >= ~0.08 (far above the 1e-16 epsilon) and the loss near log(vocab).
CONFIGS = {
    "sqr_post": ("sqr", 1, "post", 101, 1.0),
    "relu_pre": ("relu", 1, "pre", 202, 2.0),
    "elu_post": ("elu+1", 1, "post", 303, 3.0),
    "favor_pre": ("favor+", 2, "pre", 404, 2.0),
}
MADE_BY = "tests/testdata/make_performer_fixture.py"


# ----------------------------------------------------------------------------- parameters
def init_params(gen, qk_scale):
    """PyTorch default inits, written out: nn.Linear weight and bias ~ U(-1/sqrt(in), 1/sqrt(in))
    (kaiming_uniform with a=sqrt(5)), nn.Embedding ~ N(0, 1); LayerNorm weight/bias are
    N(1, 0.1^2) / N(0, 0.1^2) instead of 1 / 0 so that they are exercised."""
    p = {}

    def linear(name, n_in, n_out, scale=1.0):
        bound = 1.0 / math.sqrt(n_in)
        p[name + ".weight"] = scale * (2 * torch.rand(n_out, n_in, generator=gen) - 1) * bound
        p[name + ".bias"] = (2 * torch.rand(n_out, generator=gen) - 1) * bound

    p["input_map.weight"] = torch.randn(VOCAB, D_MODEL // 2, generator=gen)
    for r in range(LAYERS):
        pre = f"layers.{r}."
        linear(pre + "attention.q_map", D_MODEL, D_MODEL, qk_scale)
        linear(pre + "attention.k_map", D_MODEL, D_MODEL, qk_scale)
        linear(pre + "attention.v_map", D_MODEL, D_MODEL)
        linear(pre + "U_map", D_MODEL, D_FF)
        linear(pre + "V_map", D_FF, D_MODEL)
        for ln in ("layernorm1", "layernorm2"):
            p[pre + ln + ".weight"] = 1 + 0.1 * torch.randn(D_MODEL, generator=gen)
            p[pre + ln + ".bias"] = 0.1 * torch.randn(D_MODEL, generator=gen)
    linear("output_logit_map", D_MODEL, VOCAB)
    return p


def sample_favor(gen, multiplier):
    """Per layer a [H, D, M] tensor: for each head, `multiplier` orthogonal D x D blocks
    (QR of a Gaussian, signs fixed so diag(R) > 0) concatenated along the last dim, times sqrt(D)."""
    d = D_MODEL // HEADS
    out = []
    for _ in range(LAYERS):
        heads = []
        for _ in range(HEADS):
            blocks = []
            for _ in range(multiplier):
                q, r = torch.linalg.qr(torch.randn(d, d, generator=gen))
                blocks.append(q * torch.sign(torch.diagonal(r)))
            heads.append(torch.cat(blocks, dim=1) * math.sqrt(d))
        out.append(torch.stack(heads))
    return out


# ----------------------------------------------------------------------------- model
def feature_map(x, feature, proj):
    """x: (L, H, D) -> (L, H, M)."""
    if feature == "relu":
        return F.relu(x)
    if feature == "elu+1":
        return F.elu(x) + 1
    if feature == "sqr":
        return x * x
    if feature == "favor+":  # positive random features: exp(x' w - |x'|^2 / 2), x' = x D^(-1/4)
        xs = x * x.shape[-1] ** -0.25
        return torch.exp(torch.einsum("lhd,hdm->lhm", xs, proj) - 0.5 * (xs * xs).sum(-1, keepdim=True))
    raise ValueError(feature)


def doc_ids(length, doc_starts):
    starts = torch.zeros(length, dtype=torch.long)
    starts[doc_starts] = 1
    return torch.cumsum(starts, 0) - 1  # document index of every token


def attention_quadratic(fq, fk, v, doc):
    """Same-document causal linear attention, O(L^2): out_l = sum_{l'} A_ll' v_l' / (sum_{l'} A_ll' + 1e-16)
    with A_ll' = phi(q_l) . phi(k_l') for l' <= l in the same document, else 0."""
    L = fq.shape[0]
    idx = torch.arange(L)
    mask = (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])  # [l, l']
    A = torch.einsum("lhm,khm->hlk", fq, fk) * mask
    num = torch.einsum("hlk,khd->lhd", A, v)
    den = A.sum(-1).T  # (L, H)
    return num / (den[..., None] + 1e-16)


def attention_prefix(fq, fk, v, doc):
    """Same thing via per-document prefix sums S_l = sum_{l'<=l} phi(k_l') v_l'^T, z_l = sum phi(k_l')."""
    outs = []
    for d in torch.unique(doc):
        sel = doc == d
        S = torch.cumsum(torch.einsum("lhm,lhd->lhmd", fk[sel], v[sel]), 0)
        z = torch.cumsum(fk[sel], 0)
        num = torch.einsum("lhm,lhmd->lhd", fq[sel], S)
        den = torch.einsum("lhm,lhm->lh", fq[sel], z)
        outs.append(num / (den[..., None] + 1e-16))
    return torch.cat(outs)  # documents are contiguous and in order


def forward(p, cfg, tokens, doc_starts, favor, attention=attention_quadratic):
    """Returns (sum of cross-entropies, number of predicted tokens)."""
    feature, _, placement = cfg
    L, H, D = len(tokens), HEADS, D_MODEL // HEADS
    doc = doc_ids(L, doc_starts)
    pos = (torch.arange(L) - torch.as_tensor(doc_starts)[doc]).to(torch.float64)  # restarts per doc
    pos_dim = D_MODEL // 2
    freq = torch.exp(torch.arange(0, pos_dim, 2, dtype=torch.float64) * (-math.log(10000.0) / pos_dim))
    x = torch.cat([p["input_map.weight"][tokens], torch.sin(pos[:, None] * freq), torch.cos(pos[:, None] * freq)], -1)

    def lin(name, t):
        return F.linear(t, p[name + ".weight"], p[name + ".bias"])

    def ln(name, t):
        return F.layer_norm(t, (D_MODEL,), p[name + ".weight"], p[name + ".bias"], 1e-5)

    for r in range(LAYERS):
        pre = f"layers.{r}."

        def attn(t):
            q, k, v = (lin(pre + f"attention.{n}_map", t).reshape(L, H, D) for n in "qkv")
            proj = favor[r] if favor else None
            return attention(feature_map(q, feature, proj), feature_map(k, feature, proj), v, doc).reshape(L, D_MODEL)

        def ffn(t):
            return lin(pre + "V_map", F.gelu(lin(pre + "U_map", t)))  # exact erf GELU

        if placement == "post":
            x = x + ln(pre + "layernorm1", attn(x))
            x = x + ln(pre + "layernorm2", ffn(x))
        else:
            x = x + attn(ln(pre + "layernorm1", x))
            x = x + ffn(ln(pre + "layernorm2", x))

    logits = lin("output_logit_map", x)
    is_last = torch.zeros(L, dtype=torch.bool)
    is_last[torch.as_tensor(list(doc_starts[1:]) + [L]) - 1] = True  # last token of each document
    src = torch.nonzero(~is_last).squeeze(1)
    loss_sum = F.cross_entropy(logits[src], tokens[src + 1], reduction="sum")
    return loss_sum, len(src)


# ----------------------------------------------------------------------------- safetensors
def write_safetensors(path, tensors, metadata):
    header, chunks, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        dtype, arr = ("I64", t.numpy().astype("<i8")) if t.dtype == torch.long else ("F64", t.numpy().astype("<f8"))
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson + b"".join(chunks))


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack("<Q", buf[:8])[0]
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__")
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(buf[8 + n + b:8 + n + e], dtype="<i8" if h["dtype"] == "I64" else "<f8").reshape(h["shape"])
    return out, meta


# ----------------------------------------------------------------------------- generation + checks
def make_fixture(name, cfg_full, out_dir):
    feature, mult, placement, seed, qk_scale = cfg_full
    cfg = (feature, mult, placement)
    gen = torch.Generator().manual_seed(seed)
    params = init_params(gen, qk_scale)
    favor = sample_favor(gen, mult) if feature == "favor+" else None
    tokens = torch.randint(0, VOCAB, (sum(DOC_LENGTHS),), generator=gen)
    doc_starts = [int(s) for s in np.cumsum([0] + DOC_LENGTHS[:-1])]

    for t in params.values():
        t.requires_grad_(True)
    loss_sum, count = forward(params, cfg, tokens, doc_starts, favor)
    loss = loss_sum / count
    grads = torch.autograd.grad(loss, list(params.values()))
    grads = {n: g.detach() for n, g in zip(params, grads)}

    with torch.no_grad():
        # (a) central finite differences on random entries with a non-negligible gradient.
        fd_err = 0.0
        names = sorted(params)
        for i in torch.randperm(len(names), generator=gen)[:8].tolist():
            n = names[i]
            flat_g = grads[n].reshape(-1)
            cand = torch.nonzero(flat_g.abs() > 1e-3).squeeze(1)
            j = int(cand[torch.randint(0, len(cand), (1,), generator=gen)])
            flat_p, h, orig = params[n].view(-1), 1e-5, params[n].view(-1)[j].item()
            flat_p[j] = orig + h
            lp = forward(params, cfg, tokens, doc_starts, favor)[0] / count
            flat_p[j] = orig - h
            lm = forward(params, cfg, tokens, doc_starts, favor)[0] / count
            flat_p[j] = orig
            fd = (lp - lm).item() / (2 * h)
            fd_err = max(fd_err, abs(fd - flat_g[j].item()) / abs(flat_g[j].item()))
        # (b) packed loss == token-weighted combination of separately computed document losses.
        doc_sum = 0.0
        for s, n_tok in zip(doc_starts, DOC_LENGTHS):
            ls, c = forward(params, cfg, tokens[s:s + n_tok], [0], favor)
            doc_sum += (ls / c).item() * c  # mean loss of the document, weighted by its predictions
        doc_err = abs(doc_sum / count - loss.item()) / loss.item()
    # (c) prefix-sum formulation: same loss and gradient.
    ls2, _ = forward(params, cfg, tokens, doc_starts, favor, attention_prefix)
    g2 = torch.autograd.grad(ls2 / count, list(params.values()))
    prefix_err = abs(ls2.item() / count - loss.item()) / loss.item()
    prefix_gerr = max(((a - grads[n]).abs().max() / grads[n].abs().max()).item() for n, a in zip(params, g2))

    print(f"{name:10s} loss {loss.item():.12f} (log V = {math.log(VOCAB):.4f}) sum {loss_sum.item():.10f} "
          f"count {count} | max|grad| {max(g.abs().max().item() for g in grads.values()):.3e}")
    print(f"{'':10s} (a) FD max rel err {fd_err:.2e}  (b) per-doc rel err {doc_err:.2e}  "
          f"(c) prefix-sum loss rel err {prefix_err:.2e}, grad rel err {prefix_gerr:.2e}")
    assert math.isfinite(loss.item()) and 0.5 * math.log(VOCAB) < loss.item() < 2 * math.log(VOCAB)
    assert fd_err < 1e-6 and doc_err < 1e-12 and prefix_err < 1e-12 and prefix_gerr < 1e-10

    tensors = {n: t.detach() for n, t in params.items()}
    tensors.update({"grad." + n: g for n, g in grads.items()})
    tensors["fixture.tokens"] = tokens
    tensors["fixture.doc_starts"] = torch.tensor(doc_starts, dtype=torch.long)
    tensors["fixture.loss"] = loss.detach().reshape(1)
    tensors["fixture.loss_sum"] = loss_sum.detach().reshape(1)
    tensors["fixture.token_count"] = torch.tensor([count], dtype=torch.long)
    if favor:
        tensors.update({f"favor.layers.{r}": w for r, w in enumerate(favor)})
    meta = {"vocab": str(VOCAB), "d_model": str(D_MODEL), "layers": str(LAYERS), "heads": str(HEADS),
            "d_ff": str(D_FF), "feature": feature, "feature_multiplier": str(mult), "layernorm": placement,
            "made_by": MADE_BY}
    path = os.path.join(out_dir, f"performer_fixture_{name}.safetensors")
    write_safetensors(path, tensors, meta)
    back, back_meta = read_safetensors(path)  # round-trip check of the hand-written format
    assert back_meta == meta and sorted(back) == sorted(tensors)
    assert all(np.array_equal(back[n], tensors[n].numpy()) for n in tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    for name, cfg in CONFIGS.items():
        make_fixture(name, cfg, args.out_dir)
    print("all self-checks passed")


if __name__ == "__main__":
    main()

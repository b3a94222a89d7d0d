"""Synthetic decode caches and a float64 reference for the decode tests."""

from __future__ import annotations

import math
import os

import torch

import fold_attention as fa


def synth(B, Hkv, G, D, L, seed, tail=3.0, offset=2.0, dtype=torch.bfloat16):
    """q (B, H, D), k/v (B, L, Hkv, D): keys with a heavy tail along a direction u that the
    queries favour (heavy logit tails), values offset from zero by `offset`."""
    g = torch.Generator().manual_seed(seed)
    H = Hkv * G
    u = torch.randn(B, Hkv, D, generator=g)
    u = u / u.norm(dim=-1, keepdim=True)
    e = torch.empty(B, L, Hkv).exponential_(1.0, generator=g)
    k = torch.randn(B, L, Hkv, D, generator=g) + (tail * e ** 1.5).unsqueeze(-1) * u.unsqueeze(1)
    v = torch.randn(B, L, Hkv, D, generator=g) + offset
    q = torch.randn(B, H, D, generator=g) * 0.5 + 2.0 * u.repeat_interleave(G, 1)
    return q.to(dtype), k.to(dtype), v.to(dtype)


def reference(q, ks, vs, scale):
    """Float64 attention of q (H, D) over k/v (L, Hkv, D): out (H, D), natural LSE (H,)."""
    H, Hkv = q.shape[0], ks.shape[1]
    G = H // Hkv
    K = ks.double().repeat_interleave(G, 1)
    V = vs.double().repeat_interleave(G, 1)
    s = torch.einsum("hd,jhd->hj", q.double(), K) * scale
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[:, None])
    return torch.einsum("hj,jhd->hd", p, V), lse


def rel_err(x, ref):
    ref = ref.double()
    return ((x.double() - ref).norm() / ref.norm()).item()


def floor_err(ref, dtype=torch.bfloat16):
    return rel_err(ref.to(dtype), ref)


def filled_cache(k, v, lengths, H, **kw):
    """A cache whose request b holds k[b, :lengths[b]] (written with extend)."""
    B, _, Hkv, D = k.shape
    cache = fa.FoldKVCache(B, H, Hkv, D, kw.pop("max_len", max(max(lengths), 1)), dtype=k.dtype, **kw)
    for b in range(B):
        assert cache.add_request() == b
        cache.extend(b, k[b, : lengths[b]], v[b, : lengths[b]])
    return cache


def default_scale(D):
    return 1.0 / math.sqrt(D)


# ---- CPU / CUDA comparisons (the GPU decode tests) ----


def fill_requests(caches, k, v, lengths, chunks=1):
    """Requests b = 0.. of every cache get k[b, :lengths[b]] in `chunks` extends (None: free)."""
    for b, n in enumerate(lengths):
        for c in caches:
            assert c.add_request() == b
        if n is None:
            continue
        cuts = [round(i * n / chunks) for i in range(chunks + 1)]
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if hi > lo:
                for c in caches:
                    c.extend(b, k[b, lo:hi].to(c.device), v[b, lo:hi].to(c.device))
    for b, n in enumerate(lengths):
        if n is None:
            for c in caches:
                c.release(b)


def bits16(t):
    """t's bits on the CPU as integers (float32 -> int32, bf16 / fp16 -> int16)."""
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.float32,):
        return t.view(torch.int32)
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16)
    return t


CACHE_STATE = ("k_a", "k_b", "k_scale", "v", "v_a", "v_b", "v_exp", "v_page_sum", "heavy_keys", "page_table", "lengths")


def assert_same_cache(cpu, gpu):
    """Every buffer of the CUDA cache `gpu` holds the CPU cache's bits."""
    torch.cuda.synchronize()
    for name in CACHE_STATE:
        a, b = getattr(cpu, name), getattr(gpu, name)
        if a is None:
            assert b is None
            continue
        assert torch.equal(bits16(a), bits16(b)), name


def assert_matches_cpu(oc, og, lc, lg, exact):
    """GPU output / LSE against the CPU reference's: bit for bit, or (exact=False) each output
    element within one rounding of its dtype (2^-7 relative for bf16, 2^-10 for fp16) plus
    1e-5 of the largest |output| (sums that cancel), and each finite LSE within 1e-5."""
    if exact:
        assert torch.equal(bits16(oc), bits16(og))
        assert torch.equal(lc.view(torch.int32), lg.view(torch.int32))
        return
    rel = 2.0**-7 if oc.dtype == torch.bfloat16 else 2.0**-10
    a, b = oc.double(), og.double()
    scale = a.abs().max().item() if a.numel() else 0.0
    bound = rel * a.abs() + 1e-5 * scale
    over = (b - a).abs() > bound
    n_diff = int((bits16(oc) != bits16(og)).sum())
    print(f"\noutput elements that differ from the CPU's: {n_diff} of {oc.numel()}")
    assert not over.any(), (b - a).abs()[over][:8]
    fin = torch.isfinite(lc)
    assert torch.equal(fin, torch.isfinite(lg))
    assert torch.equal(lc[~fin], lg[~fin])
    if fin.any():
        assert (lg[fin].double() - lc[fin].double()).abs().max().item() <= 1e-5


def assert_graph_replays(graphed, capture, qs, ks, vs, expected, tag=""):
    """Captures `capture(graphed, q, k, v)` -> (out, lse) once in a CUDA graph, on copies of the
    first step's inputs (the capture itself runs nothing: the lengths stay), then replays it with
    each step's inputs copied in: replay i gives expected[i]'s (out, lse) bits."""
    lengths = graphed.lengths.tolist()
    sq, sk, sv = qs[0].clone(), ks[0].clone(), vs[0].clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = capture(graphed, sq, sk, sv)
    torch.cuda.synchronize()
    assert graphed.lengths.tolist() == lengths  # capture ran nothing
    for i in range(len(qs)):
        sq.copy_(qs[i])
        sk.copy_(ks[i])
        sv.copy_(vs[i])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(bits16(out), bits16(expected[i][0])), (tag, i)
        assert torch.equal(bits16(lse), bits16(expected[i][1])), (tag, i)


def step_outputs(cache, q, k=None, v=None):
    """One fold_attn_with_kvcache step (append when k / v are given): out and LSE on the CPU,
    and the step's statistics."""
    dev = cache.device
    to = lambda x: None if x is None else x.to(dev)  # noqa: E731
    out, lse = fa.fold_attn_with_kvcache(to(q), cache, to(k), to(v), return_lse=True)
    return out.cpu(), lse.cpu(), cache.stats()


def tensor_core_path(v8, D, depth, G):
    """Whether a CUDA step's value product runs on the tensor cores, so that its output matches
    the CPU reference within one output rounding (the same weight bits, N summed in fp32 in
    the mma's order) instead of bit for bit. bf16 / fp16 V: always. v8 caches at D 64 / 128:
    where the dense ring reads them (depth None, or any depth the planner reads densely, i.e.
    unless FOLD_DECODE_SCREEN=1 keeps the screen: decode_plan.h screen_pays) unless the rings are
    off; with the screen kept, where split2 runs them (G <= 16, split2_plan) unless
    FOLD_DECODE_V8_SPLIT2=0. Elsewhere (D 256, G > 16, the knobs off) split_item's fma product
    keeps the reference's order. Read when the step runs (tests set these variables). Groups
    that the guard flags are recomputed by split_item (exact), which "within one rounding"
    admits."""
    if not v8:
        return True
    env = os.environ.get
    if D not in (64, 128):
        return False
    if depth is None or env("FOLD_DECODE_SCREEN") != "1":
        return env("FOLD_DECODE_RING") != "0" and env("FOLD_DECODE_V8_RING") != "0"
    return (
        G <= 16
        and env("FOLD_DECODE_SPLIT2") != "0"
        and env("FOLD_DECODE_V8_SPLIT2") != "0"
        and (G <= 4 or env("FOLD_DECODE_SPLIT2_WIDE") != "0")
        and (G <= 8 or env("FOLD_DECODE_SPLIT2_G16") != "0")
    )


# ---- a shared page pool (FoldKVCache num_pages) ----


def play_pool_script(cache, q, k, v, script):
    """Plays `script` on `cache` (("add", n) reserves n tokens, ("extend", b, lo, hi),
    ("release", b), ("step", tokens) appends token `tokens` of every active request and
    attends); returns each step's (out, lse, stats) on the CPU."""
    outs = []
    for op in script:
        if op[0] == "add":
            cache.add_request(length=op[1])
        elif op[0] == "extend":
            _, b, lo, hi = op
            cache.extend(b, k[b, lo:hi].to(cache.device), v[b, lo:hi].to(cache.device))
        elif op[0] == "release":
            cache.release(op[1])
        else:
            t = op[1]
            out, lse, stats = step_outputs(cache, q, k[:, t], v[:, t])
            outs.append((out, lse, stats))
    return outs


# Four requests, two released and re-added part way, so the small pool's pages come back in
# another order (and request 1's new pages are request 3's old ones); the steps open pages
# (lengths cross multiples of 64).
POOL_SCRIPT = [
    ("add", 0), ("add", 0), ("add", 0), ("add", 0),
    ("extend", 0, 0, 130), ("extend", 1, 0, 60), ("extend", 2, 0, 190), ("extend", 3, 0, 63),
    ("step", 200),
    ("release", 3), ("release", 1), ("add", 70), ("add", 0),
    ("extend", 1, 0, 127), ("extend", 3, 0, 255),
    ("step", 201), ("step", 202),
]

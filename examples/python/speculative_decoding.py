"""Speculative decoding's cache flow over one FoldKVCache: draft, verify, cut back.

Each round a draft proposes `n` tokens per request. The target appends all of them and attends
their queries in one call (fold_attn_with_kvcache with q of shape (batch, n, heads, head_dim):
query i sees its request's cache up to draft token i). Some prefix of each draft is accepted;
FoldKVCache.truncate forgets the rest, so the request continues exactly as if the rejected tokens
had never been appended. At the end every request's cache is checked against a cache that only
ever received the accepted tokens: the same bits in a step.

The "model" is random projections and acceptance is a coin: the point is the cache's flow, the
same on the CPU reference and on a CUDA cache.

    python3 examples/python/speculative_decoding.py [--device cuda] [--rounds 12] [--draft 4]
"""

from __future__ import annotations

import argparse
import random

import torch

import fold_attention as fa


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--draft", type=int, default=4, help="draft tokens per request per round")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    B, H, Hkv, D, max_len = args.batch, 8, 2, 64, 2048
    dev = torch.device(args.device)
    rng = random.Random(args.seed)
    g = torch.Generator().manual_seed(args.seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(dev)

    cache = fa.FoldKVCache(B, H, Hkv, D, max_len, depth=16, page_size=64, device=dev)
    # `plain` receives only the accepted tokens: the reference the speculative cache must equal.
    plain = fa.FoldKVCache(B, H, Hkv, D, max_len, depth=16, page_size=64, device=dev)
    for b in range(B):
        n = rng.randint(50, 400)
        q, k, v = rand(n, H, D), rand(n, Hkv, D), rand(n, Hkv, D)
        for c in (cache, plain):
            c.add_request()
            c.prefill_request(b, q, k, v)
    drafted = accepted = 0
    for _ in range(args.rounds):
        n = args.draft
        qd, kd, vd = rand(B, n, H, D), rand(B, n, Hkv, D), rand(B, n, Hkv, D)
        lengths = cache.lengths.tolist()
        out = fa.fold_attn_with_kvcache(qd, cache, kd, vd)  # verify: one call for n tokens
        assert out.shape == (B, n, H, D) and bool(torch.isfinite(out).all())
        for b in range(B):
            keep = 0
            while keep < n and rng.random() < 0.7:  # the target agrees with the draft's next token
                keep += 1
            cache.truncate(b, lengths[b] + keep)  # the rejected drafts are forgotten
            if keep:
                plain.extend(b, kd[b, :keep], vd[b, :keep])
            drafted += n
            accepted += keep
    assert cache.lengths.tolist() == plain.lengths.tolist()
    q = rand(B, H, D)
    a, la = fa.fold_attn_with_kvcache(q, cache, return_lse=True)
    p, lp = fa.fold_attn_with_kvcache(q, plain, return_lse=True)
    same = torch.equal(a.view(torch.int16), p.view(torch.int16)) and torch.equal(la, lp)
    summary = {"rounds": args.rounds, "drafted": drafted, "accepted": accepted,
               "lengths": cache.lengths.tolist(), "same_bits_as_plain": same}
    print(summary)
    return summary


if __name__ == "__main__":
    main()

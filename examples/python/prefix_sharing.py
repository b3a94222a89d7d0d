"""A shared system prompt over one FoldKVCache: prefill it once, fork it per user, add each turn.

Request 0 holds the system prompt. Each user's request is a fork of it (sharing its full pages:
one page of its own at most), and the user's turn is a chunk after that history
(FoldKVCache.prefill_request on a request that holds tokens: causal over the cached prompt and
the turn). The turn's output is checked against a request that was given the system prompt and
the turn in one prefill, and the pool's pages against what separate copies would take.

The "model" is random projections: the point is the cache's flow, the same on the CPU reference
and on a CUDA cache.

    python3 examples/python/prefix_sharing.py [--device cuda] [--users 6]
"""

from __future__ import annotations

import argparse

import torch

import fold_attention as fa


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--users", type=int, default=6)
    ap.add_argument("--system", type=int, default=700, help="system prompt tokens")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    H, Hkv, D, page = 8, 2, 64, 64
    dev = torch.device(args.device)
    g = torch.Generator().manual_seed(args.seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(dev)

    S = args.system
    cache = fa.FoldKVCache(args.users + 1, H, Hkv, D, 2048, depth=16, page_size=page, device=dev)
    check = fa.FoldKVCache(1, H, Hkv, D, 2048, depth=16, page_size=page, device=dev)
    sq, sk, sv = rand(S, H, D), rand(S, Hkv, D), rand(S, Hkv, D)
    cache.add_request()
    cache.prefill_request(0, sq, sk, sv)
    worst, separate = 0.0, 0
    for u in range(args.users):
        n = 40 + 37 * u
        tq, tk, tv = rand(n, H, D), rand(n, Hkv, D), rand(n, Hkv, D)
        r = cache.fork(0)
        out = cache.prefill_request(r, tq, tk, tv)  # the turn, after the shared prompt
        # The same tokens given at once: the turn's rows of one causal prefill.
        check.add_request()
        whole = check.prefill_request(0, torch.cat([sq, tq]), torch.cat([sk, tk]), torch.cat([sv, tv]))
        check.release(0)
        ref = whole[S:].double()
        worst = max(worst, ((out.double() - ref).norm() / ref.norm()).item())
        separate += -(-(S + n) // page)
    used = cache.num_pages - cache.free_pages
    summary = {"users": args.users, "pages_used": used, "pages_if_separate": separate + -(-S // page),
               "worst_relative_difference": worst}
    print(summary)
    return summary


if __name__ == "__main__":
    main()

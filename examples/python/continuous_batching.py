"""Continuous batching over one FoldKVCache whose slots share a page pool.

Requests arrive with prompts of different lengths and generate different numbers of
tokens. A scheduler admits a waiting request when a slot and the pages its prompt needs
are free, steps every active request together, and releases each one as it finishes, so
that its pages serve the next. Before a step it checks that the pool can open a page for
every request whose last page is full, and otherwise preempts the longest request: its
pages return to the pool and it waits again at the head of the queue, its prompt now
holding the tokens it generated (recomputed by prefill on readmission).

The "model" is random projections: the point is the cache's bookkeeping, the same on the CPU
reference and on a CUDA cache.

    python3 examples/python/continuous_batching.py [--device cuda] [--requests 24]
"""

from __future__ import annotations

import argparse
import random

import torch

import fold_attention as fa


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--num-pages", type=int, default=24, help="pages of 64 tokens shared by the slots")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    H, Hkv, D, max_len, page = 8, 2, 64, 1024, 64
    dev = torch.device(args.device)
    rng = random.Random(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    # At max_len the slots would need slots x 16 pages; the pool holds far fewer.
    cache = fa.FoldKVCache(args.slots, H, Hkv, D, max_len, depth=16, page_size=page, device=dev,
                           num_pages=args.num_pages)
    waiting = [(i, rng.randint(20, 300), rng.randint(5, 120)) for i in range(args.requests)]
    running: dict[int, list] = {}  # slot -> [request id, tokens still to generate]
    done, preempted, steps, peak = [], [], 0, 0

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(dev)

    while waiting or running:
        # Admit while a slot is free and the pool holds the prompt's pages.
        while waiting and len(running) < args.slots:
            rid, prompt, gen = waiting[0]
            if -(-prompt // page) > cache.free_pages:
                break
            waiting.pop(0)
            slot = cache.add_request()
            cache.prefill_request(slot, rand(prompt, H, D), rand(prompt, Hkv, D), rand(prompt, Hkv, D))
            running[slot] = [rid, gen]
        if not running:
            raise RuntimeError(f"request {waiting[0][0]}'s prompt needs more pages than the pool has")
        # Every request whose last page is full opens one this step: make room first.
        while sum(cache.pages_needed(s) for s in running) > cache.free_pages:
            slot = max(running, key=cache.length)
            rid, gen = running.pop(slot)
            waiting.insert(0, (rid, cache.length(slot), gen))
            preempted.append(rid)
            cache.release(slot)
        peak = max(peak, cache.num_pages - cache.free_pages)
        # One decode step for every active slot (rows of free slots are ignored).
        B = cache.batch
        out = fa.fold_attn_with_kvcache(rand(B, H, D), cache, rand(B, Hkv, D), rand(B, Hkv, D))
        assert bool(torch.isfinite(out).all())
        steps += 1
        for slot in list(running):
            running[slot][1] -= 1
            if running[slot][1] == 0:
                done.append(running.pop(slot)[0])
                cache.release(slot)
    summary = {"finished": len(done), "preemptions": len(preempted), "steps": steps,
               "peak_pages": peak, "num_pages": cache.num_pages,
               "pages_at_max_len": args.slots * -(-max_len // page)}
    print(summary)
    return summary


if __name__ == "__main__":
    main()

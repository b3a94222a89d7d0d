"""Times the cache's serving operations (µs per call, eager, CUDA events on a GPU, wall clock on
the CPU):

- a chunk of n tokens after a request's history of L tokens (FoldKVCache.prefill_request on a
  request that holds tokens), against
  - the same n tokens as n steps (fold_attn_with_kvcache with q of n tokens, n <= 128 only),
  - recomputing the whole L + n prompt (fold_attn_varlen_func over every token, what a cache
    without the chunk path would do),
  - SDPA over contiguous bf16 K / V of L + n keys with the chunk's causal mask (a lower bound a
    paged prefill kernel would aim at), on CUDA;
- the same chunk under a 128-key sliding window: the history's keys read back into one forward,
  against decode steps per token;
- FoldKVCache.truncate of a speculative draft's 4 tokens (host time: a cut whose tokens left
  the heavy-key list alone, and one that entered it).

    python3 scripts/time_serving_ops.py [--device cuda] [--quick]
Each timed call restores the cache first (release and refill outside the timing).
"""

from __future__ import annotations

import argparse
import time

import torch

import fold_attention as fa


def timer(dev):
    """run(fn, setup, reps): the median µs of reps calls of fn, setup() before each (untimed)."""
    def run(fn, setup, reps):
        ts = []
        for _ in range(reps):
            setup()
            if dev.type == "cuda":
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                torch.cuda.synchronize()
                ts.append(s.elapsed_time(e) * 1e3)
            else:
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
        return sorted(ts)[len(ts) // 2]
    return run


def refill(cache, k, v) -> None:
    """Slot 0 of `cache` holds exactly the tokens k, v again (released and refilled)."""
    if cache.active:
        cache.release(0)
    cache.add_request()
    cache.extend(0, k, v)


def main(argv=None) -> list:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="small shapes (a CPU smoke run)")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    run = timer(dev)
    if args.quick:
        H, Hkv, D, histories, chunks, reps = 8, 2, 64, (300,), (8, 40), 2
    else:
        H, Hkv, D, histories, chunks, reps = 32, 8, 128, (4096, 16384), (16, 128, 1024), 9
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(dev)

    rows = []
    print(f"H {H}/{Hkv} D {D}, µs per call on {dev.type}")
    print(f"{'L':>6} {'n':>5} | {'chunk':>9} {'n steps':>9} {'recompute':>10} {'sdpa':>9}")
    for L in histories:
        q, k, v = rand(L, H, D), rand(L, Hkv, D), rand(L, Hkv, D)
        cache = fa.FoldKVCache(1, H, Hkv, D, L + max(chunks), depth=16, page_size=256, device=dev)
        restore = lambda: refill(cache, k, v)  # noqa: E731
        for n in chunks:
            cq, ck, cv = rand(n, H, D), rand(n, Hkv, D), rand(n, Hkv, D)
            t_chunk = run(lambda: cache.prefill_request(0, cq, ck, cv), restore, reps)
            t_steps = float("nan")
            if n <= 128:
                t_steps = run(lambda: fa.fold_attn_with_kvcache(cq.unsqueeze(0), cache, ck.unsqueeze(0),
                                                                cv.unsqueeze(0)), restore, reps)
            aq, ak, av = torch.cat([q, cq]), torch.cat([k, ck]), torch.cat([v, cv])
            cu = torch.tensor([0, L + n], dtype=torch.int32, device=dev)
            t_all = run(lambda: fa.fold_attn_varlen_func(aq, ak, av, cu, causal=True), lambda: None, reps)
            t_sdpa = float("nan")
            if dev.type == "cuda":
                G = H // Hkv
                qs = cq.transpose(0, 1).unsqueeze(0)
                ks = ak.repeat_interleave(G, 1).transpose(0, 1).unsqueeze(0)
                vs = av.repeat_interleave(G, 1).transpose(0, 1).unsqueeze(0)
                mask = torch.ones(n, L + n, dtype=torch.bool, device=dev).tril(L)
                t_sdpa = run(lambda: torch.nn.functional.scaled_dot_product_attention(
                    qs, ks, vs, attn_mask=mask), lambda: None, reps)
            rows.append(dict(L=L, n=n, chunk=t_chunk, steps=t_steps, recompute=t_all, sdpa=t_sdpa))
            print(f"{L:>6} {n:>5} | {t_chunk:9.1f} {t_steps:9.1f} {t_all:10.1f} {t_sdpa:9.1f}",
                  flush=True)
    # a sliding window of 128 keys (gpt-oss): the read-back route against decode steps per token
    from fold_attention import _history
    L = histories[0]
    q, k, v = rand(L, H, D), rand(L, Hkv, D), rand(L, Hkv, D)
    cache = fa.FoldKVCache(1, H, Hkv, D, L + max(chunks), depth=16, page_size=256, device=dev)
    print(f"window (127, 0), L {L}: {'n':>5} | {'read-back':>9} {'steps':>9}")
    for n in chunks:
        cq, ck, cv = rand(n, H, D), rand(n, Hkv, D), rand(n, Hkv, D)
        times = []
        for cap in (_history.TAIL_KEYS_MAX, 0):
            saved, _history.TAIL_KEYS_MAX = _history.TAIL_KEYS_MAX, cap
            try:
                times.append(run(lambda: cache.prefill_request(0, cq, ck, cv, window_size=(127, 0)),
                                 lambda: refill(cache, k, v), reps))
            finally:
                _history.TAIL_KEYS_MAX = saved
        rows.append(dict(L=L, n=n, window=127, tail=times[0], steps=times[1]))
        print(f"{'':>25} {n:>5} | {times[0]:9.1f} {times[1]:9.1f}", flush=True)
    # truncate: a draft of 4 tokens cut back (host time; the cut tokens in the heavy list or not)
    L = histories[0]
    k, v = rand(L + 4, Hkv, D), rand(L + 4, Hkv, D)
    heavy = k.clone()
    heavy[L:] *= 50  # draft keys that enter the heavy-key list: the list is rebuilt
    cache = fa.FoldKVCache(1, H, Hkv, D, L + 4, depth=16, page_size=256, device=dev)
    for name, keys in (("truncate", k), ("truncate (heavy list rebuilt)", heavy)):
        t = run(lambda: cache.truncate(0, L), lambda: refill(cache, keys, v), reps)
        rows.append(dict(op=name, L=L, us=t))
        print(f"{name}, L {L}: {t:.1f} µs", flush=True)
    return rows


if __name__ == "__main__":
    main()

"""Graphed decode step time (attend only, L2 flushed before each replay) with a sliding window
and attention sinks against the plain step on the same cache, and torch SDPA over the window's
keys (contiguous bf16 KV, the cuDNN / flash backends where they take the shapes). Per case and
depth: microseconds per step of fold plain, fold windowed, fold windowed + sinks, SDPA over the
window, and the window's keys per microsecond. Not the benchmark protocol: a quick look at what
a windowed step costs (with bf16 / fp16 V a dense windowed step runs the dense ring and a
screened one split2, v8 caches the plain split kernel; FOLD_DECODE_RING=0 / FOLD_DECODE_SPLIT2=0
send them to the plain split too).

    python3 scripts/time_decode_window.py     (needs a GPU and a CUDA build)
    FOLD_DECODE_WINDOW_CASES="B,L,H,Hkv,D,W;..."   (default below: gpt-oss's 128-key window at
                                                    D 64 H 64/8, Mistral's 4096 at D 128 H 32/8)
    --kernels: also each kernel's device time per windowed step (torch.profiler over eager steps)
    --v8: caches with V in two E4M3 planes
"""
import sys

import torch
import torch.nn.functional as F

import fold_attention as fa
from fold_attention.decode import decode_step_cuda
from graph_timing import graphed_median  # scripts/ is on sys.path when run as a script
from quick_timing import env_cases

CASES = [  # (B, L, H, Hkv, D, W)
    (1, 8192, 64, 8, 64, 128),
    (32, 8192, 64, 8, 64, 128),
    (1, 32768, 32, 8, 128, 4096),
    (32, 8192, 32, 8, 128, 4096),
]


def cases():
    return env_cases("FOLD_DECODE_WINDOW_CASES", CASES)


def main():
    dev = torch.device("cuda")
    print(f"{'B':>3} {'L':>6} {'H':>3} {'Hkv':>3} {'D':>4} {'W':>5} {'depth':>5} | us/step: plain window"
          f" window+sinks sdpa-window | window keys/us")
    for B, L, H, Hkv, D, W in cases():
        torch.manual_seed(0)
        k = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16)
        q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
        sinks = torch.randn(H, device=dev)
        out = torch.empty(B, H, D, device=dev, dtype=torch.bfloat16)
        lse = torch.empty(B, H, device=dev, dtype=torch.float32)
        kw = k[:, -W:].transpose(1, 2).contiguous()  # (B, Hkv, W, D): SDPA over the window
        vw = v[:, -W:].transpose(1, 2).contiguous()
        qs = q.view(B, H, 1, D)
        for depth in (None, 16):
            cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=depth, v8="--v8" in sys.argv, device=dev)
            for b in range(B):
                cache.add_request()
                cache.extend(b, k[b], v[b])
            plain = graphed_median(lambda: decode_step_cuda(cache, q, None, None, out, lse))
            win = graphed_median(lambda: decode_step_cuda(cache, q, None, None, out, lse,
                                                          window_size=(W - 1, 0)))
            both = graphed_median(lambda: decode_step_cuda(cache, q, None, None, out, lse,
                                                           window_size=(W - 1, 0), sinks=sinks))
            sdpa = graphed_median(lambda: F.scaled_dot_product_attention(qs, kw, vw, enable_gqa=True))
            print(f"{B:>3} {L:>6} {H:>3} {Hkv:>3} {D:>4} {W:>5} {str(depth):>5} | {plain:8.1f} {win:8.1f}"
                  f" {both:8.1f} {sdpa:8.1f} | {B * Hkv * W / win:8.1f}", flush=True)
            if "--kernels" in sys.argv:
                from backward_kernel_times import kernel_times  # scripts/ is on sys.path
                for label, extra in (("plain", {}), ("window", {"window_size": (W - 1, 0)})):
                    per = kernel_times(lambda: decode_step_cuda(cache, q, None, None, out, lse,
                                                                **extra), 20)
                    print(f"    {label} kernels {sum(per.values()):6.1f} us: " + ", ".join(
                        f"{n} {t:.1f}" for n, t in sorted(per.items(), key=lambda x: -x[1])[:6]),
                        flush=True)
            del cache
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

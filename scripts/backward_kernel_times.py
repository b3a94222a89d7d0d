"""Per-kernel device time of a training backward (torch.profiler, CUDA activity): which share of
the backward the preprocess, the main kernel and the postprocess take, next to cuDNN's backward
kernels through SDPA on the same inputs. Not the benchmark protocol (no L2 flush, no graphs):
the per-kernel split only.

    python3 scripts/backward_kernel_times.py [--shapes "B,S,H,Hkv,D;..."] [--causal 0|1] [--reps N]
"""
import argparse
import collections
import re

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import fold_attention as fa

SHAPES = "2,8192,32,8,128;4,4096,32,8,128;8,2048,16,16,128;8,2048,32,32,64;2,8192,64,8,64;16,1024,32,8,128"


def short(name):
    m = re.search(r"(\w+_kernel|\w*[Kk]ernel\w*|cudnn\w*|memset\w*|Memset\w*|Memcpy\w*)", name)
    return (m.group(0) if m else name)[:60]


def kernel_times(fn, reps):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    acc = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acc[short(e.name)] += e.device_time / reps
    return acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--causal", type=int, default=0)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    causal = bool(a.causal)
    for spec in a.shapes.split(";"):
        B, S, H, Hkv, D = (int(x) for x in spec.split(","))
        g = torch.Generator(device="cuda").manual_seed(0)
        mk = lambda h: torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
        q, k, v = mk(H).requires_grad_(), mk(Hkv).requires_grad_(), mk(Hkv).requires_grad_()
        dout = mk(H)
        out = fa.fold_attn_func(q, k, v, causal=causal)
        fold = kernel_times(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), a.reps)
        rep = H // Hkv
        qt = q.detach().transpose(1, 2).requires_grad_()
        kt = k.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_()
        vt = v.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_()
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
            so = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        cud = kernel_times(lambda: torch.autograd.grad(so, (qt, kt, vt), dout.transpose(1, 2),
                                                       retain_graph=True), a.reps)
        print(f"== B={B} S={S} H={H}/{Hkv} D={D} causal={causal}: fold {sum(fold.values()):.1f} us, "
              f"cudnn {sum(cud.values()):.1f} us (kernel sums)")
        for tag, acc in (("fold", fold), ("cudnn", cud)):
            for name, t in sorted(acc.items(), key=lambda x: -x[1]):
                print(f"   {tag:6s} {t:9.1f} us  {name}")


if __name__ == "__main__":
    main()

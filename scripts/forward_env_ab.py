"""Interleaved A/B of our forward under settings read per call (FOLD_FWD_*), for shapes outside
the protocol's list: each shape and mask, the settings timed in turn (CUDA events, 5 rounds of 10
calls each, median per setting), bits compared with the first setting.

    python3 scripts/forward_env_ab.py FOLD_FWD_EPI shf,stg 4,4096,16,16,256 8,2048,16,16,96
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import os
import statistics
import sys

import torch

import fold_attention as fa

name, values = sys.argv[1], sys.argv[2].split(",")
shapes = [tuple(int(x) for x in s.split(",")) for s in sys.argv[3:]]
for B, S, H, Hkv, D in shapes:
    torch.manual_seed(0)
    q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for causal in (True, False):
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        times = {x: [] for x in values}
        outs = {}
        for x in values:  # warm-up and bits
            os.environ[name] = x
            outs[x] = fa.fold_attn_func(q, k, v, causal=causal)
        for _ in range(5):
            for x in values:
                os.environ[name] = x
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    fa.fold_attn_func(q, k, v, causal=causal)
                b.record()
                torch.cuda.synchronize()
                times[x].append(a.elapsed_time(b) / 10)
        base = statistics.median(times[values[0]])
        row = []
        for x in values:
            t = statistics.median(times[x])
            same = torch.equal(outs[x], outs[values[0]])
            row.append(f"{x} {flops / t / 1e9:.1f} TFLOP/s ({base / t:.3f}x, bits {'=' if same else '!='})")
        print(f"B{B}-S{S}-H{H}/{Hkv}-D{D}-{'causal' if causal else 'full'}: " + " | ".join(row), flush=True)
os.environ.pop(name, None)

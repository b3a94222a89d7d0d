"""Decode steps to profile (ncu / nsys): batch B, one token appended per step, then attend, on a
cache of L keys (H / Hkv heads, head dim D, depth None = dense). Warm-up steps first, then
STEPS profiled ones (ncu: --launch-skip past the warm-up, or filter by NVTX range "steps").

    ncu --metrics gpu__time_duration.sum --nvtx --nvtx-include "steps/" --csv \\
        python3 scripts/profile_decode_step.py 1 4096 64 8 128 16
    (args: B L H Hkv D depth|dense)
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import sys

import torch

import fold_attention as fa

B, L, H, Hkv, D = (int(x) for x in sys.argv[1:6])
depth = None if len(sys.argv) < 7 or sys.argv[6] == "dense" else float(sys.argv[6])
STEPS = 3
dev = "cuda"
torch.manual_seed(0)
cache = fa.FoldKVCache(B, H, Hkv, D, L + 16, depth=depth, device=dev)
for b in range(B):
    cache.add_request()
    cache.extend(b, torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16),
                 torch.randn(L, Hkv, D, device=dev, dtype=torch.bfloat16) + 1.0)


def step():
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, D, device=dev, dtype=torch.bfloat16)
    return fa.fold_attn_with_kvcache(q, cache, k, v)


for _ in range(3):
    step()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("steps")
for _ in range(STEPS):
    step()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print("profiled", STEPS, "steps; stats", cache.stats())

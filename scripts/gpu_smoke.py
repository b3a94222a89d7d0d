"""A small call of every CUDA kernel, for compute-sanitizer (memcheck, racecheck):
the backward preprocess, the training forward and the training backward."""
import torch

import fold_attention as fa
from fold_attention import ops

torch.manual_seed(0)
dev = "cuda"
for dtype in (torch.bfloat16, torch.float16):
    for d in (64, 128):
        lengths = [5, 0, 70, 1]
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=dev)
        t = int(cu[-1])
        k = torch.randn(t, 2, d, device=dev, dtype=dtype)
        v = torch.randn(t, 2, d, device=dev, dtype=dtype)
        o = torch.randn(t, 6, d, device=dev, dtype=dtype)
        do = torch.randn(t, 6, d, device=dev, dtype=dtype)
        ops.bwd_preprocess(k, v, o, do, cu_seqlens=cu)
        # Training forward + backward, packed (GQA) and dense (causal).
        q = torch.randn(t, 6, d, device=dev, dtype=dtype, requires_grad=True)
        kk, vv = (x.clone().requires_grad_(True) for x in (k, v))
        fa.fold_attn_varlen_func(q, kk, vv, cu, causal=False).backward(do)
        qd = torch.randn(2, 70, 4, d, device=dev, dtype=dtype, requires_grad=True)
        kd = torch.randn(2, 70, 2, d, device=dev, dtype=dtype, requires_grad=True)
        vd = torch.randn(2, 70, 2, d, device=dev, dtype=dtype, requires_grad=True)
        fa.fold_attn_func(qd, kd, vd, causal=True).backward(torch.randn_like(qd))
torch.cuda.synchronize()
print("gpu smoke: ok")

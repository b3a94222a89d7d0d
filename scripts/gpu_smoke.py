"""A small call of every CUDA kernel, for compute-sanitizer (memcheck, racecheck)."""
import torch

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
torch.cuda.synchronize()
print("gpu smoke: ok")

"""The cuDNN (torch SDPA) counterpart of profile_backward.py: forward once, then two backwards,
bf16, (B, S, H, Hkv, D), causal (1) or not (0); K / V expanded to H heads beforehand (SDPA's
GQA handling is not what is profiled). For a per-kernel comparison with ours:

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
        python3 scripts/profile_sdpa_backward.py 16 1024 32 8 128 0
(needs a GPU)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B, S, H, Hkv, D = (int(x) for x in sys.argv[1:6])
causal = sys.argv[6] == "1" if len(sys.argv) > 6 else True
torch.manual_seed(0)
mk = lambda h: torch.randn(B, h, S, D, device="cuda", dtype=torch.bfloat16)  # noqa: E731
q = mk(H).requires_grad_()
k = mk(Hkv).repeat_interleave(H // Hkv, dim=1).detach().requires_grad_()
v = mk(Hkv).repeat_interleave(H // Hkv, dim=1).detach().requires_grad_()
do = mk(H)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(2):
        torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()

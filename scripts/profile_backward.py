"""A backward call to profile (ncu / nsys): the forward once, then two backwards of the same
graph, bf16, dense (B, S, H, Hkv, D), causal (1) or not (0); ours, or with "sdpa" last torch
SDPA's cuDNN backend (K / V expanded to H heads beforehand: SDPA's GQA handling is not what is
profiled), for a kernel-by-kernel comparison.

    ncu --kernel-name regex:backward_sm90 --launch-skip 1 --launch-count 1 --set full \\
        --import-source yes -o bwd python3 scripts/profile_backward.py 4 4096 32 8 128 1
    ncu --clock-control none --metrics gpu__time_duration.sum --csv \\
        python3 scripts/profile_backward.py 16 1024 32 8 128 0 sdpa
(needs a GPU and, for ours, a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import sys

import torch

B, S, H, Hkv, D = (int(x) for x in sys.argv[1:6])
causal = sys.argv[6] == "1" if len(sys.argv) > 6 else True
sdpa = len(sys.argv) > 7 and sys.argv[7] == "sdpa"
torch.manual_seed(0)
# SDPA's layout is (B, H, S, D); ours (B, S, H, D).
shape = (lambda h: (B, h, S, D)) if sdpa else (lambda h: (B, S, h, D))  # noqa: E731
mk = lambda h: torch.randn(*shape(h), device="cuda", dtype=torch.bfloat16)  # noqa: E731
q, k, v, do = mk(H), mk(Hkv), mk(Hkv), mk(H)
if sdpa:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    k, v = (x.repeat_interleave(H // Hkv, dim=1) for x in (k, v))
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        for _ in range(2):
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
else:
    import fold_attention as fa

    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fa.fold_attn_func(q, k, v, causal=causal)
    for _ in range(2):
        torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()

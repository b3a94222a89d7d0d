"""A backward call to profile (ncu / nsys): fold_attn_func forward once, then two backwards of the
same graph, bf16, dense (B, S, H, Hkv, D) and causal (1) or not (0).

    ncu --kernel-name regex:backward_sm90 --launch-skip 1 --launch-count 1 --set full \\
        --import-source yes -o bwd python3 scripts/profile_backward.py 4 4096 32 8 128 1
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import sys

import torch

import fold_attention as fa

B, S, H, Hkv, D = (int(x) for x in sys.argv[1:6])
causal = sys.argv[6] == "1" if len(sys.argv) > 6 else True
torch.manual_seed(0)
q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
do = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
out = fa.fold_attn_func(q, k, v, causal=causal)
for _ in range(2):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()

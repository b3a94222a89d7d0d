"""A varlen backward call to profile (ncu / nsys), as scripts/profile_backward.py does for dense
ones: the forward once, then two backwards of the same graph, bf16, packed sequences of the
given lengths (default: the issue's 16-sequence mix), H / Hkv heads of head dim D, causal
(1) or not (0).

    ncu --kernel-name regex:backward_ws --launch-skip 1 --launch-count 1 \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum \\
        python3 scripts/profile_backward_varlen.py 32 8 128 0 [L1,L2,...]
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import sys

import torch

import fold_attention as fa
from benchmarks.training import ISSUE_VARLEN_MIX

H, Hkv, D = (int(x) for x in sys.argv[1:4])
causal = sys.argv[4] == "1" if len(sys.argv) > 4 else True
lengths = [int(x) for x in sys.argv[5].split(",")] if len(sys.argv) > 5 else list(ISSUE_VARLEN_MIX)
torch.manual_seed(0)
total = sum(lengths)
cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
mk = lambda h: torch.randn(total, h, D, device="cuda", dtype=torch.bfloat16)  # noqa: E731
q, k, v, do = mk(H), mk(Hkv), mk(Hkv), mk(H)
q, k, v = (x.requires_grad_() for x in (q, k, v))
out = fa.fold_attn_varlen_func(q, k, v, cu, max_seqlen=max(lengths), causal=causal)
for _ in range(2):
    torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
torch.cuda.synchronize()

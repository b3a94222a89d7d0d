"""A forward call to profile (ncu / nsys): three forwards, bf16, dense (B, S, H, Hkv, D), causal (1)
or not (0); ours, or with "sdpa" last torch SDPA's cuDNN backend (K / V expanded to H heads
beforehand), for a kernel-by-kernel comparison. FOLD_FWD_VARIANT and the other forward settings
apply as in any call.

    ncu --kernel-name regex:forward_v1 --launch-skip 1 --launch-count 1 --set full \\
        python3 scripts/profile_forward.py 8 2048 32 32 64 0
    ncu --kernel-name regex:fprop --launch-skip 1 --launch-count 1 --set full \\
        python3 scripts/profile_forward.py 8 2048 32 32 64 0 sdpa
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
q, k, v = mk(H), mk(Hkv), mk(Hkv)
if sdpa:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    k, v = (x.repeat_interleave(H // Hkv, dim=1) for x in (k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
else:
    import fold_attention as fa

    for _ in range(3):
        fa.fold_attn_func(q, k, v, causal=causal)
torch.cuda.synchronize()

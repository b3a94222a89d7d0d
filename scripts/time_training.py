"""Quick timing of the CUDA training kernels (not the benchmark protocol: no L2 flush, no
graphs, no arm rotation; use `python -m benchmarks.forward` / `backward` for reported
figures). Prints TFLOP/s of fold's forward and backward next to torch SDPA (cuDNN).

    python3 scripts/time_training.py [B S H Hkv D]   (default 2 8192 32 8 128, causal)

FOLD_BWD_VARIANT (v1 = v1's CTA order, else v1.1's, the default) is read by the library at
every call, so `FOLD_BWD_VARIANT=v1 python3 scripts/time_training.py` times that order; the
variant is printed in the header. scripts/time_backward_variants.py compares them in one run.
"""
import os
import sys

import torch
import torch.nn.functional as F

import fold_attention as fa
from quick_timing import timed  # scripts/ is on sys.path when run as a script


def main():
    B, S, H, Hkv, D = (int(x) for x in sys.argv[1:6]) if len(sys.argv) > 5 else (2, 8192, 32, 8, 128)
    dtype, dev = torch.bfloat16, "cuda"
    torch.manual_seed(0)
    q = torch.randn(B, S, H, D, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
    dout = torch.randn(B, S, H, D, device=dev, dtype=dtype)
    fwd_flops = 4 * B * H * S * S * D / 2
    bwd_flops = 2.5 * fwd_flops

    def fold_fwd():
        with torch.no_grad():
            fa.fold_attn_func(q, k, v, causal=True)

    out = fa.fold_attn_func(q, k, v, causal=True)

    def fold_bwd():
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    rep = H // Hkv
    qt = q.detach().transpose(1, 2).requires_grad_(True)
    kt = k.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_(True)
    vt = v.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_(True)
    dt = dout.transpose(1, 2)

    def sdpa_fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    sout = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    def sdpa_bwd():
        torch.autograd.grad(sout, (qt, kt, vt), dt, retain_graph=True)

    variant = os.environ.get("FOLD_BWD_VARIANT", "default (v1.1)")
    print(f"causal B={B} S={S} H={H}/{Hkv} D={D} bf16 (median of 10, warm L2), "
          f"FOLD_BWD_VARIANT={variant}")
    for name, fn, flops in (("fold fwd", fold_fwd, fwd_flops), ("fold bwd", fold_bwd, bwd_flops),
                            ("sdpa fwd", sdpa_fwd, fwd_flops), ("sdpa bwd", sdpa_bwd, bwd_flops)):
        t = timed(fn)
        print(f"{name}: {t * 1e3:8.3f} ms  {flops / t / 1e12:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()

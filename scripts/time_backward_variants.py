"""Quick timing of the CUDA backward's variants side by side (FOLD_BWD_VARIANT is read at every
call, so one process times them all) next to torch SDPA (cuDNN, nondeterministic), causal and
full, on the benchmark's shapes. Warm L2, eager, median of 10: a quick look, not the benchmark
protocol. The backward includes preprocess, grid memset and postprocess. Also checks that
every variant gives the bits (dq, dk, dv) of the first one on each shape.

    python3 scripts/time_backward_variants.py [variant ...]   (default: v1 v1.1)

Shapes: the benchmark's, or FOLD_TIME_SHAPES="B,S,H,Hkv,D;...".
A variant is a FOLD_BWD_VARIANT value, "default" (nothing set), or NAME=VALUE for another
setting read at every call (FOLD_BWD_HB_CHUNK=n: the CTA chunk target), set alone.
(No graphed mode: a backward alone cannot be captured on a side stream while its forward ran
on another, and a silent fallback to eager once mislabelled eager timings as graphed.)

("v1.1" is not a value the library knows: any value other than v1 is the default, v1.1's
CTA order; v1 is v1's order. For A/B builds, any label is set as FOLD_BWD_VARIANT.)
"""
import sys

import torch
import torch.nn.functional as F

import fold_attention as fa
from quick_timing import select_setting, shapes, timed  # scripts/ is on sys.path when run as a script

SETTINGS = ("FOLD_BWD_VARIANT", "FOLD_BWD_HB_CHUNK")


def select(var):
    select_setting(var, SETTINGS)


def bits(t):
    return t.view(torch.int16)


def main():
    variants = sys.argv[1:] or ["v1", "v1.1"]
    torch.manual_seed(0)
    cols = variants + ["sdpa"]
    print("shape causal | " + " | ".join(f"{c} ms TFLOP/s" for c in cols) + " | sdpa/best")
    for B, S, H, Hkv, D in shapes():
        q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
        rep = H // Hkv
        qt = q.detach().transpose(1, 2).requires_grad_(True)
        kt = k.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_(True)
        vt = v.detach().repeat_interleave(rep, 2).transpose(1, 2).requires_grad_(True)
        dt = dout.transpose(1, 2)
        for causal in (True, False):
            flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)
            out = fa.fold_attn_func(q, k, v, causal=causal)
            res, first = {}, None
            for var in variants:
                select(var)

                def run():
                    return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

                grads = run()
                if first is None:
                    first = grads
                else:
                    for name, a, b in zip(("dq", "dk", "dv"), grads, first):
                        if not torch.equal(bits(a), bits(b)):
                            print(f"  BITS DIFFER: {var} vs {variants[0]} {name}")
                res[var] = timed(run)
            select("default")
            sout = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

            def sdpa():
                torch.autograd.grad(sout, (qt, kt, vt), dt, retain_graph=True)

            res["sdpa"] = timed(sdpa)
            del sout, out
            best = min(res[v_] for v_ in variants)
            cells = " | ".join(f"{res[c] * 1e3:.3f} {flops / res[c] / 1e12:.0f}" for c in cols)
            print(f"({B},{S},{H}/{Hkv},{D}) {'causal' if causal else 'full'} | {cells} | "
                  f"{res['sdpa'] / best:.2f}x", flush=True)


if __name__ == "__main__":
    main()

"""The main job: one attention training step through FoldAttention, checked.

    python -m fold_attention._demo_training [--device cpu|cuda] [--seqlen N]

(Also the second half of `python -m fold_attention.demo`.)

It runs a causal GQA forward and backward, compares out/dQ/dK/dV against a float64
reference (next to torch's own SDPA in the same dtype), and checks the product promise:
gradients bit-identical under repeat, inside a batch of other requests, and packed at an
offset (varlen). Without GPU kernels for the chosen device it says so and uses the CPU
reference backend.
"""

from __future__ import annotations

import argparse
import time

import torch

from . import built_with_cuda, fold_attn_func, fold_attn_varlen_func


def _reference(q, k, v, dout, causal):
    """float64 attention and its gradients (GQA by repeating K/V heads)."""
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(g, dim=2) for x in (k64, v64))
    s = torch.einsum("bihd,bjhd->bhij", q64, kk) / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    out = torch.einsum("bhij,bjhd->bihd", s.softmax(-1), vv)
    out.backward(dout.double())
    return out.detach(), q64.grad, k64.grad, v64.grad


def _rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def _step(q, k, v, dout, causal):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = fold_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _sdpa(q, k, v, dout, causal):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    kk, vv = (x.repeat_interleave(g, dim=2) for x in (k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kk.transpose(1, 2), vv.transpose(1, 2), is_causal=causal
    ).transpose(1, 2)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    device = torch.device(args.device)
    torch.manual_seed(0)
    shape = (1, args.seqlen, args.heads, args.head_dim)
    kv_shape = (1, args.seqlen, args.kv_heads, args.head_dim)

    def rand(s):
        return torch.randn(s, dtype=dtype, device=device)

    q, k, v, dout = rand(shape), rand(kv_shape), rand(kv_shape), rand(shape)
    try:
        _step(q[:, :8], k[:, :8], v[:, :8], dout[:, :8], True)
    except (NotImplementedError, RuntimeError) as e:  # no kernels here, or not an SM90 GPU
        print(f"note: {e}\n      -> running on the CPU reference backend instead")
        device = torch.device("cpu")
        q, k, v, dout = (x.cpu() for x in (q, k, v, dout))

    print(f"FoldAttention demo: causal GQA training step, {args.dtype}, B=1 S={args.seqlen} "
          f"H={args.heads}/{args.kv_heads} D={args.head_dim}, device={device} "
          f"(library built with CUDA: {built_with_cuda()})")
    steps = ["fold step", "float64 reference", "torch SDPA", "repeat", "batch of 3", "packed"]
    t0 = time.perf_counter()
    ours = _step(q, k, v, dout, True)
    t_ours = time.perf_counter() - t0
    print(f"[1/{len(steps)}] forward+backward: {t_ours * 1e3:.1f} ms")
    ref = _reference(q.cpu(), k.cpu(), v.cpu(), dout.cpu(), True)
    print(f"[2/{len(steps)}] float64 reference done")
    torch_ref = _sdpa(q, k, v, dout, True)
    print(f"[3/{len(steps)}] torch SDPA ({args.dtype}) done")
    print("  relative error vs float64      out        dQ         dK         dV")
    for name, res in (("FoldAttention", ours), (f"torch SDPA {args.dtype}", torch_ref)):
        errs = "  ".join(f"{_rel(x.cpu(), r):.3e}" for x, r in zip(res, ref))
        print(f"  {name:<28} {errs}")

    again = _step(q, k, v, dout, True)
    print(f"[4/{len(steps)}] repeat: bit-identical = {_same(ours, again)}")

    others = [rand(shape) for _ in range(2)], [rand(kv_shape) for _ in range(4)], [rand(shape) for _ in range(2)]
    qb = torch.cat([others[0][0], q, others[0][1]])
    kb = torch.cat([others[1][0], k, others[1][1]])
    vb = torch.cat([others[1][2], v, others[1][3]])
    db = torch.cat([others[2][0], dout, others[2][1]])
    batched = _step(qb, kb, vb, db, True)
    inside = _same([x[1:2] for x in batched], ours)
    print(f"[5/{len(steps)}] same request inside a batch of 3: bit-identical = {inside}")

    pre = 37
    qp = torch.cat([rand((pre, args.heads, args.head_dim)), q[0]])
    kp = torch.cat([rand((pre, args.kv_heads, args.head_dim)), k[0]])
    vp = torch.cat([rand((pre, args.kv_heads, args.head_dim)), v[0]])
    dp = torch.cat([rand((pre, args.heads, args.head_dim)), dout[0]])
    cu = torch.tensor([0, pre, pre + args.seqlen], dtype=torch.int32, device=device)
    qp, kp, vp = (x.detach().requires_grad_(True) for x in (qp, kp, vp))
    outp = fold_attn_varlen_func(qp, kp, vp, cu, causal=True)
    outp.backward(dp)
    packed = [outp.detach()[pre:], qp.grad[pre:], kp.grad[pre:], vp.grad[pre:]]
    same_packed = _same(packed, [x[0] for x in ours])
    print(f"[6/{len(steps)}] packed at token offset {pre} (varlen): bit-identical = {same_packed}")
    ok = _same(ours, again) and inside and same_packed
    print("demo:", "all promises held" if ok else "A PROMISE FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

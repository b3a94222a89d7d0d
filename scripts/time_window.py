"""Quick timing of sliding-window training attention (not the benchmark protocol: eager, warm
L2, median of events). Per shape and window: fold's forward and backward with the window, the
same without it (causal), and FlexAttention with a sliding-window block mask where it compiles
(torch.nn.attention.flex_attention; its backward is not deterministic-checked here). TFLOP/s
count only the visible (query, key) pairs: 4 D flops per pair forward, 10 D backward.

    python3 scripts/time_window.py            (needs a GPU)
    FOLD_WINDOW_CASES="B,S,H,Hkv,D,W;..."     (W: HF's sliding_window, causal; default below)
    --kernels: also fold's windowed forward and backward per kernel (torch.profiler device time,
        microseconds per call) against the events' time per call, which includes the host's
        time when the call is host-bound
    --graphed: also every arm's forward and forward + backward captured in a CUDA graph and
        replayed (L2 flushed before each replay; no host time), printed as a second row
        ("graphed"; backward = forward + backward - forward)
"""
import sys

import torch

import fold_attention as fa
from quick_timing import env_cases, timed  # scripts/ is on sys.path when run as a script

CASES = [  # (B, S, H, Hkv, D, W)
    (2, 8192, 32, 8, 128, 4096),
    (2, 8192, 32, 8, 128, 1024),
    (1, 16384, 32, 8, 128, 4096),
    (4, 4096, 32, 8, 128, 512),
    (2, 8192, 64, 8, 64, 1024),
]


def cases():
    return env_cases("FOLD_WINDOW_CASES", CASES)


def visible_pairs(S, W):
    """Causal pairs with i - j < W: rows 0..W-1 see i + 1 keys, the rest W."""
    w = min(W, S)
    return w * (w + 1) // 2 + (S - w) * w


def flex_arm(q, k, v, W):
    """FlexAttention with the window as a block mask, or None where it is unavailable."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    B, S, H, _ = q.shape
    Hkv = k.shape[2]

    def window(b, h, qi, kj):
        return (kj <= qi) & (qi - kj < W)

    mask = create_block_mask(window, None, None, S, S, device=q.device)
    fn = torch.compile(flex_attention, dynamic=False)
    qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_(True) for x in (q, k, v))

    def run():
        return fn(qt, kt, vt, block_mask=mask, enable_gqa=Hkv != H)

    return run, (qt, kt, vt)


def kernel_split(q, k, v, dout, W):
    """fold's windowed forward and backward: each kernel's device time per call, and the
    events' time per call (printed before the case's row)."""
    from backward_kernel_times import kernel_times  # scripts/ is on sys.path

    def fwd():
        return fa.fold_attn_func(q, k, v, causal=True, window_size=(W - 1, 0))

    out = fwd()

    def bwd():
        return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    for name, fn in (("fwd", fwd), ("bwd", bwd)):
        per = kernel_times(fn, 10)
        total = sum(per.values())
        print(f"  {name}: events {timed(fn) * 1e6:8.1f} us/call, kernels {total:8.1f} us: " +
              ", ".join(f"{n} {t:.1f}" for n, t in sorted(per.items(), key=lambda x: -x[1])[:5]),
              flush=True)


def graphed_row(arms, pairs, D):
    """TFLOP/s of each (forward, step) arm from graph replays: forward, and step - forward as
    the backward; NaN where the capture fails (reported)."""
    from graph_timing import graphed_median  # scripts/ is on sys.path

    out = []
    for name, fwd, step in arms:
        try:
            t_f = graphed_median(fwd) * 1e-6
            t_b = graphed_median(step) * 1e-6 - t_f
            out.append((4 * D * pairs / t_f / 1e12, 10 * D * pairs / t_b / 1e12))
        except Exception as exc:  # (reported, not fatal)
            print(f"  {name}: graph capture failed: {type(exc).__name__}: {str(exc)[:120]}")
            out.append((float("nan"), float("nan")))
    return out


def main():
    dev, dtype = "cuda", torch.bfloat16
    print(f"{'B':>2} {'S':>6} {'H':>3} {'Hkv':>3} {'D':>4} {'W':>6} | fwd TF/s: fold-win fold-causal flex"
          f" | bwd TF/s: fold-win fold-causal flex")
    for B, S, H, Hkv, D, W in cases():
        torch.manual_seed(0)
        q = torch.randn(B, S, H, D, device=dev, dtype=dtype, requires_grad=True)
        k = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
        v = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
        dout = torch.randn(B, S, H, D, device=dev, dtype=dtype)
        win_pairs = B * H * visible_pairs(S, W)
        causal_pairs = B * H * visible_pairs(S, S)
        row = []
        for window, pairs in (((W - 1, 0), win_pairs), ((-1, -1), causal_pairs)):
            def fwd(window=window):
                return fa.fold_attn_func(q, k, v, causal=True, window_size=window)

            out = fwd()
            t_f = timed(fwd)
            t_b = timed(lambda out=out: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
            row.append((4 * D * pairs / t_f / 1e12, 10 * D * pairs / t_b / 1e12))
        flex = None
        try:
            arm = flex_arm(q, k, v, W)
            if arm is not None:
                run, inputs = arm
                o = run()
                d = dout.transpose(1, 2)
                t_f = timed(run)
                t_b = timed(lambda: torch.autograd.grad(o, inputs, d, retain_graph=True))
                flex = (4 * D * win_pairs / t_f / 1e12, 10 * D * win_pairs / t_b / 1e12)
        except Exception as exc:  # (reported, not fatal: the fold arms are what this times)
            print(f"  flex unavailable: {type(exc).__name__}: {str(exc)[:120]}")
        if "--kernels" in sys.argv:
            kernel_split(q, k, v, dout, W)
        fx = flex or (float("nan"), float("nan"))
        print(f"{B:>2} {S:>6} {H:>3} {Hkv:>3} {D:>4} {W:>6} | {row[0][0]:8.1f} {row[1][0]:11.1f} "
              f"{fx[0]:5.1f} | {row[0][1]:8.1f} {row[1][1]:11.1f} {fx[1]:5.1f}", flush=True)
        if "--graphed" in sys.argv:
            # Fresh leaves: q, k, v's gradient nodes were made on the default stream by the eager
            # timings above, and a capture (on its own stream) that reaches them is invalidated.
            qg, kg, vg = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
            arms = []
            for name, window in (("fold-win", (W - 1, 0)), ("fold-causal", (-1, -1))):
                def fwd(window=window):
                    return fa.fold_attn_func(qg, kg, vg, causal=True, window_size=window)

                arms.append((name, fwd,
                             lambda fwd=fwd: torch.autograd.grad(fwd(), (qg, kg, vg), dout)))
            pairs = [win_pairs, causal_pairs, win_pairs]
            if flex is not None:
                run, inputs = flex_arm(qg, kg, vg, W)  # (its own fresh leaves)
                d = dout.transpose(1, 2)
                arms.append(("flex", run, lambda: torch.autograd.grad(run(), inputs, d)))
            g = [graphed_row([a], p, D)[0] for a, p in zip(arms, pairs)]
            gx = g[2] if len(g) > 2 else (float("nan"), float("nan"))
            print(f"{'graphed':>24} | {g[0][0]:8.1f} {g[1][0]:11.1f} {gx[0]:5.1f} | {g[0][1]:8.1f} "
                  f"{g[1][1]:11.1f} {gx[1]:5.1f}", flush=True)


if __name__ == "__main__":
    main()

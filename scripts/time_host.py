"""The host's share of an eager training call (not the benchmark protocol). Per shape, for each
route of fold's eager call (FOLD_EAGER_AUTOGRAD 1: the autograd.Function, 0: the custom ops),
and for SDPA (its flash backend) as torch's own C++ op:
  host     the host's time per call (perf_counter over back-to-back calls, no sync between;
           the launch queue never fills at these counts), forward, and forward + backward;
  events   one call alone between two events (the GPU idles until the host launches: host +
           device when the host is slower);
  stream   back-to-back calls between two events, per call (max(host, device) per call: what a
           training step with a full launch queue sees).
Then the top of a cProfile of the forward + backward on the eager route.

    python3 scripts/time_host.py    (needs a GPU)
    FOLD_HOST_CASES="B,S,H,Hkv,D,W;..."   (W 0: causal without a window)
"""
import cProfile
import io
import os
import pstats
import time

import torch
import torch.nn.functional as F

import fold_attention as fa
from quick_timing import env_cases, timed  # scripts/ is on sys.path when run as a script

CASES = [(1, 128, 8, 8, 64, 0), (1, 8192, 64, 8, 64, 128), (2, 8192, 32, 8, 128, 0)]


def cases():
    return env_cases("FOLD_HOST_CASES", CASES)


def host_us(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return host * 1e6


def stream_us(fn, n=20):
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / n


def row(label, fwd, step):
    cols = [host_us(fwd), host_us(step), timed(fwd) * 1e6, timed(step) * 1e6, stream_us(fwd),
            stream_us(step)]
    print(f"  {label:<10} " + " ".join(f"{c:9.1f}" for c in cols), flush=True)


def calls(B, S, H, Hkv, D, W, dev="cuda", dtype=torch.bfloat16):
    """(fwd, step, (q, k, v, dout)): one case's causal eager forward, and forward + backward (W 0:
    no window), on random bf16 tensors. Prints the case's line first."""
    print(f"B {B} S {S} H {H}/{Hkv} D {D} window {W or 'none'} (causal)", flush=True)
    torch.manual_seed(0)
    q = torch.randn(B, S, H, D, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(B, S, Hkv, D, device=dev, dtype=dtype, requires_grad=True)
    dout = torch.randn(B, S, H, D, device=dev, dtype=dtype)
    window = (W - 1, 0) if W else (-1, -1)

    def fwd():
        return fa.fold_attn_func(q, k, v, causal=True, window_size=window)

    def step():
        return torch.autograd.grad(fwd(), (q, k, v), dout)
    return fwd, step, (q, k, v, dout)


def main():
    print("per call, us:  host fwd  host f+b  event fwd event f+b stream fwd stream f+b")
    for B, S, H, Hkv, D, W in cases():
        fwd, step, (q, k, v, dout) = calls(B, S, H, Hkv, D, W)
        for route in ("1", "0"):
            os.environ["FOLD_EAGER_AUTOGRAD"] = route
            row(f"fold {'fn' if route == '1' else 'ops'}", fwd, step)
        os.environ.pop("FOLD_EAGER_AUTOGRAD")
        if not W:
            qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_(True) for x in (q, k, v))
            dt = dout.transpose(1, 2)

            def sdpa():
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                      enable_gqa=H != Hkv)

            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                row("sdpa", sdpa, lambda: torch.autograd.grad(sdpa(), (qt, kt, vt), dt))
    B, S, H, Hkv, D, W = cases()[0]
    q, k, v = (torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for h in (H, Hkv, Hkv))
    dout = torch.randn_like(q)
    os.environ["FOLD_EAGER_AUTOGRAD"] = "1"
    prof = cProfile.Profile()
    for i in range(250):
        if i == 50:
            prof.enable()
        torch.autograd.grad(fa.fold_attn_func(q, k, v, causal=True), (q, k, v), dout)
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(18)
    print("cProfile, 200 forward + backward, first shape, eager route:")
    print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[-2400:])


if __name__ == "__main__":
    main()

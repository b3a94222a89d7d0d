"""Quick timing of the CUDA forward's variants side by side (FOLD_FWD_VARIANT is read at every
call, so one process times them all) next to torch SDPA (cuDNN), causal and full, on the
benchmark's shapes. Warm L2, eager, median of 10: a quick look, not the benchmark protocol.
Also checks that every variant gives the bits of the first one on each shape.

    python3 scripts/time_forward_variants.py [--graph] [variant ...]
        (default variants: v1 v1.1 v1.1-nopp v1.2)

A variant is a FOLD_FWD_VARIANT value, "default" (nothing set: the library's choice), or
NAME=VALUE for another setting read at every call (e.g. FOLD_FWD_HB_CHUNK=0, the tile order
before its chunks), set alone.

--graph: each call is captured once in a CUDA graph (the variant is picked at capture) and
the replays are timed (mean of 20 back-to-back replays, median of 5), so the Python
wrapper's per-call host time (allocations, validation, ctypes), which the eager timing puts
between the start event and the launch, is left out: kernel time, for both fold and SDPA.
"""
import sys

import torch
import torch.nn.functional as F

import fold_attention as fa
from quick_timing import SHAPES, select_setting, timed  # scripts/ is on sys.path when run as a script

def timed_graph(fn, reps=20, rounds=5):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (and one-time setup) outside the capture
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    times.sort()
    return times[len(times) // 2]


SETTINGS = ("FOLD_FWD_VARIANT", "FOLD_FWD_HB_CHUNK")


def select(var):
    select_setting(var, SETTINGS)


def main():
    args = sys.argv[1:]
    use_graph = "--graph" in args
    args = [a for a in args if a != "--graph"]
    timer = timed_graph if use_graph else timed
    variants = args or ["v1", "v1.1", "v1.1-nopp", "v1.2"]
    print("timing: " + ("CUDA graph replays (kernel time)" if use_graph else
                        "eager calls, host wrapper time included"))
    torch.manual_seed(0)
    cols = variants + ["sdpa"]
    print("shape causal | " + " | ".join(f"{c} ms TFLOP/s" for c in cols) + " | best/sdpa")
    for B, S, H, Hkv, D in SHAPES:
        q = torch.randn(B, S, H, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
        rep = H // Hkv
        qt = q.transpose(1, 2)
        kt = k.repeat_interleave(rep, 2).transpose(1, 2)
        vt = v.repeat_interleave(rep, 2).transpose(1, 2)
        for causal in (True, False):
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            res, first = {}, None
            for var in variants:
                select(var)

                def run():
                    with torch.no_grad():
                        return fa.fold_attn_func(q, k, v, causal=causal, return_lse=True)

                out, lse = run()
                if first is None:
                    first = (out, lse)
                elif not (torch.equal(out.view(torch.int16), first[0].view(torch.int16))
                          and torch.equal(lse, first[1])):
                    print(f"  BITS DIFFER: {var} vs {variants[0]}")
                res[var] = timer(run)
            select("default")

            def sdpa():
                with torch.no_grad():
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

            res["sdpa"] = timer(sdpa)
            best = min(res[v_] for v_ in variants)
            cells = " | ".join(f"{res[c] * 1e3:.3f} {flops / res[c] / 1e12:.0f}" for c in cols)
            print(f"({B},{S},{H}/{Hkv},{D}) {'causal' if causal else 'full'} | {cells} | "
                  f"{res['sdpa'] / best:.2f}x", flush=True)


if __name__ == "__main__":
    main()

"""Backward preprocess time with rows of zeros in dO (loss-masked tokens), on the GPU.

Rows of zeros must not send their block through the preprocess's second (rare-row) pass. Prints
the median graphed time, L2 flushed, for 0% and 50% zero rows at (8, 2048, 16/16, 128).
"""
import statistics, torch
from fold_attention import ops
for zero_frac in (0.0, 0.5):
    B, S, H, Hkv, D = 8, 2048, 16, 16, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h: torch.randn(B, S, h, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v, o, do = mk(Hkv), mk(Hkv), mk(H), mk(H)
    if zero_frac:
        do[:, ::2] = 0  # every other token: loss-masked rows
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    side = torch.cuda.Stream(); side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        ops.bwd_preprocess(k, v, o, do)
        with torch.cuda.graph(graph, stream=side):
            ops.bwd_preprocess(k, v, o, do)
    torch.cuda.current_stream().wait_stream(side)
    ts = []
    for _ in range(30):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); graph.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    print(f"zero rows {zero_frac:.0%}: {statistics.median(ts):.1f} us")

"""What the quick timing scripts share (scripts/time_*.py; not the benchmark protocol): the
benchmark's training shapes and an eager, warm-L2 median timer."""
import torch

SHAPES = [  # (B, S, H, Hkv, D): the training benchmark's shapes
    (2, 8192, 32, 8, 128),
    (4, 4096, 32, 8, 128),
    (8, 2048, 16, 16, 128),
    (8, 2048, 32, 32, 64),
    (2, 8192, 64, 8, 64),
    (16, 1024, 32, 8, 128),
]


def timed(fn, iters=10, warmup=3):
    """Median seconds of `fn` over `iters` calls after `warmup`, each timed alone by events."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]

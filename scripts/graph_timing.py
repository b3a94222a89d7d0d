"""Graph-replay timing shared by the decode scripts: the median of a captured call's replays,
each after the L2 is flushed (a 512 MB write), in microseconds. Needs a GPU."""
import torch

_flush = None


def flush_l2():
    """Writes 512 MB, so that a timed call starts from a cold L2."""
    global _flush
    if _flush is None:
        _flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    _flush.zero_()


def replay_times(g, reps):
    """g (a captured torch.cuda.CUDAGraph) replayed reps times, each after flush_l2(); the
    replay times in microseconds."""
    ts = []
    for _ in range(reps):
        flush_l2()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return ts


def graphed_median(fn, reps=20):
    """fn() captured once in a CUDA graph (after one eager warm-up call on a side stream), then replayed reps
    times, each after flush_l2(); the median replay time in microseconds."""
    side = torch.cuda.Stream()  # (warm-up on a side stream, as torch's capture recipe does)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    ts = replay_times(g, reps)
    return sorted(ts)[len(ts) // 2]

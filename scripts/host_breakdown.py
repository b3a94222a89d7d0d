"""Where an eager training call's host time goes (not the benchmark protocol; needs a GPU).

Per shape, forward and forward + backward on the eager route:
  total     the Python call's wall time per call (perf_counter over back-to-back calls, no sync
            between; the launch queue never fills at these counts);
  C calls   each library entry point's wall time per call, timed by wrapping the ctypes
            functions (what the library's host side costs: checks, tensor maps, launches);
  pieces    the torch calls the wrapper makes around them, timed alone in a loop on the same
            device: torch.empty of the outputs, torch.cuda.device(...) enter / exit and the
            package's device_scope, the current stream's handle (torch's public query and the
            package's stream_handle), the autograd engine's round trip for a no-op Function.
The rest (total minus C calls) is the package's Python and torch's dispatch.

    python3 scripts/host_breakdown.py [--profile]   (FOLD_HOST_CASES="B,S,H,Hkv,D,W;...", W 0: no
                                                     window)
--profile: also the CUDA runtime / driver calls per call (torch.profiler with CUPTI), by self host
time.
"""
import collections
import sys
import time

import torch

from fold_attention import _lib
from fold_attention._device import device_scope, stream_handle
from quick_timing import env_cases  # scripts/ is on sys.path when run as a script
from time_host import calls, host_us

CASES = [(1, 128, 8, 8, 64, 0), (2, 8192, 32, 8, 128, 0)]
ENTRY_POINTS = ("fold_fwd_cuda", "fold_fwd_cuda_kv_bounds", "fold_bwd_cuda",
                "fold_bwd_cuda_kv_bounds", "fold_bwd_cuda_workspace_size")


class TimedLibrary:
    """The loaded library with ENTRY_POINTS wrapped by wall-clock timers."""

    def __init__(self, lib):
        self._lib = lib
        self.spent = collections.Counter()
        self.calls = collections.Counter()

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name not in ENTRY_POINTS:
            return fn

        def timed(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.spent[name] += time.perf_counter() - t
                self.calls[name] += 1
        return timed

    def reset(self):
        self.spent.clear()
        self.calls.clear()


class _Noop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


def pieces(dev):
    x = torch.zeros(4, device=dev, requires_grad=True)
    g = torch.ones(4, device=dev)

    def enter_exit():
        with torch.cuda.device(dev):
            pass

    def scope_enter_exit():
        with device_scope(dev):
            pass

    for label, fn in (
            ("torch.empty (4 KB, cuda)", lambda: torch.empty(1024, device=dev)),
            ("torch.cuda.device(...) enter / exit", enter_exit),
            ("device_scope (the package's) enter / exit", scope_enter_exit),
            ("current_stream(dev).cuda_stream", lambda: torch.cuda.current_stream(dev).cuda_stream),
            ("stream_handle (the package's)", lambda: stream_handle(dev)),
            ("autograd.grad through a no-op Function",
             lambda: torch.autograd.grad(_Noop.apply(x), x, g))):
        print(f"  {label:<42} {host_us(fn, 2000):8.2f} us", flush=True)


def main():
    profile = "--profile" in sys.argv[1:]
    dev, dtype = torch.device("cuda"), torch.bfloat16
    timed_lib = TimedLibrary(_lib.library())
    _lib.library = lambda: timed_lib  # the package looks the library up per call
    print("torch pieces, per call:")
    pieces(dev)
    for B, S, H, Hkv, D, W in env_cases("FOLD_HOST_CASES", CASES):
        fwd, step, _ = calls(B, S, H, Hkv, D, W, dev, dtype)
        n = 50 if S * B <= 4096 else 10
        for label, fn in (("forward", fwd), ("forward + backward", step)):
            for _ in range(3):  # the first calls load the kernels' modules (milliseconds): not counted
                fn()
            torch.cuda.synchronize()
            timed_lib.reset()
            total = host_us(fn, n)
            runs = n + 5  # host_us's warm-up calls are counted by the wrapper too
            c_us = {name: timed_lib.spent[name] / runs * 1e6 for name in timed_lib.spent}
            print(f"  {label}: total {total:.1f} us, C calls {sum(c_us.values()):.1f} us "
                  f"(" + ", ".join(f"{k} {v:.1f}" for k, v in sorted(c_us.items())) + ")",
                  flush=True)
            if profile:
                runtime_calls(fn)


def runtime_calls(fn, calls=5):
    """The CUDA runtime / driver calls of `calls` calls of fn (CUPTI sees the library's calls
    too), by self host time: what the C calls' time is made of."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.key.startswith(("cuda", "cu"))]
    rows.sort(key=lambda e: -e.self_cpu_time_total)
    for e in rows[:12]:
        print(f"      {e.key:<44} {e.count / calls:5.1f} per call "
              f"{e.self_cpu_time_total / calls:8.1f} us per call", flush=True)


if __name__ == "__main__":
    main()

"""Host µs per launch from shared libraries loaded into a torch process (needs a GPU): the
library's static CUDA runtime against the shared one (benchmarks/micro/launch_in_process.cu,
built both ways), and torch's own launches, all in this one process after torch has set up CUDA.
Median of 7 rounds of 2,000 launches, on torch's current stream (the legacy default stream unless
the caller set one) and on a stream of its own.

    python3 scripts/launch_in_process.py LIB.so [LIB.so ...]
"""
import ctypes
import statistics
import sys
import time

import torch


def main() -> None:
    dev = torch.device("cuda")
    x = torch.zeros(1, device=dev)
    scratch = torch.empty(256, dtype=torch.uint8, device=dev)
    stream = torch.cuda.current_stream(dev).cuda_stream  # (0: the legacy default stream)
    side = torch.cuda.Stream(dev).cuda_stream
    print(f"torch's current stream handle: {stream:#x}")
    torch.cuda.synchronize()

    def torch_us():
        t = time.perf_counter()
        for _ in range(2000):
            x.add_(1)
        dt = (time.perf_counter() - t) / 2000 * 1e6
        torch.cuda.synchronize()
        return dt

    torch_us()
    print(f"{'torch x.add_(1) (its dispatch included)':<72} {statistics.median(torch_us() for _ in range(7)):7.2f}")
    for path in sys.argv[1:]:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            print(f"{path}: not loaded ({e})")
            continue
        lib.launch_us.restype = ctypes.c_double
        lib.launch_us.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        for sname, sh in (("torch's current stream", stream), ("a torch.cuda.Stream()", side)):
            for kind, what in ((0, "empty 1 x 32"), (1, "forward-shaped"), (2, "cudaMemsetAsync")):
                lib.launch_us(kind, 100, sh, scratch.data_ptr())
                us = statistics.median(lib.launch_us(kind, 2000, sh, scratch.data_ptr()) for _ in range(7))
                print(f"{path.rsplit('/', 1)[-1] + ': ' + what + ', ' + sname:<72} {us:7.2f}", flush=True)


if __name__ == "__main__":
    main()

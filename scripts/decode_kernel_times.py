"""Where one CUDA decode attend goes, kernel by kernel: eager attends (no append; L2 flushed
before each) under torch.profiler, each kernel's mean device duration, and the graphed attend's
median time beside it. The durations overlap where programmatic dependent launch lets a kernel
start before its predecessor ends, so their sum can exceed the graphed time.

python scripts/decode_kernel_times.py             B1 L32K, B32 L8K, B128 L4K; H 64 / Hkv 8, D 128
python scripts/decode_kernel_times.py --g4        H 32 / Hkv 8
python scripts/decode_kernel_times.py --shapes "1,2048,9,3,64;1,8192,9,3,64"   (B,L,H,Hkv,D;...)
python scripts/decode_kernel_times.py --dense-only  depth None only
python scripts/decode_kernel_times.py --screened-only  depth 16 only
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""

import collections
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import fold_attention as fa
from fold_attention.decode import decode_step_cuda
from graph_timing import flush_l2, graphed_median

dev = torch.device("cuda")
H_ = 32 if "--g4" in sys.argv else 64
SHAPES = ((1, 32768, H_, 8, 128), (32, 8192, H_, 8, 128), (128, 4096, H_, 8, 128))
if "--shapes" in sys.argv:
    SHAPES = tuple(tuple(int(x) for x in s.split(","))
                   for s in sys.argv[sys.argv.index("--shapes") + 1].split(";") if s)
DEPTHS = ((None,) if "--dense-only" in sys.argv else (16.0,) if "--screened-only" in sys.argv
          else (None, 16.0))
REPS = 10


def short(name):
    m = re.search(r"(decode_\w+|append_\w+)(<[^>]*>)?", name)
    if m:
        return m.group(0)
    return name[:40]


for B, L, H, Hkv, D in SHAPES:
    torch.manual_seed(0)
    k = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16) + 1.0
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    for depth in DEPTHS:
        cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=depth, device=dev)
        for b in range(B):
            cache.add_request()
            cache.extend(b, k[b], v[b])
        out = torch.empty(B, H, D, dtype=torch.bfloat16, device=dev)
        lse = torch.empty(B, H, dtype=torch.float32, device=dev)

        def attend():
            decode_step_cuda(cache, q, None, None, out, lse)

        t_graph = graphed_median(attend)
        for _ in range(3):
            attend()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPS):
                flush_l2()
                attend()
            torch.cuda.synchronize()
        # Each attend's launches of one kernel in start order: #0 = the first (pass 0), #1 the
        # guard's pass 1.
        evs = sorted((ev for ev in prof.events()
                      if ev.device_type == torch.autograd.DeviceType.CUDA
                      and "elementwise" not in ev.name and "fill" not in ev.name.lower()),
                     key=lambda ev: ev.time_range.start)
        names = [short(ev.name) for ev in evs]
        launches = collections.Counter(names)
        per = collections.defaultdict(list)
        seen = collections.Counter()
        for ev, name in zip(evs, names):
            per_attend = launches[name] // REPS
            key = f"{name} #{seen[name] % per_attend}" if per_attend > 1 else name
            seen[name] += 1
            per[key].append(ev.device_time_total if hasattr(ev, "device_time_total")
                            else ev.cuda_time_total)
        print(f"B={B} L={L} H={H}/{Hkv} D={D} depth={depth}: graphed attend {t_graph:.1f} us",
              flush=True)
        total = 0.0
        for name, ts in per.items():
            mean = sum(ts) / REPS  # per attend (a kernel may run twice: the guard's pass)
            total += mean
            print(f"    {name:44s} {len(ts) / REPS:4.1f} launches/attend  {mean:8.1f} us/attend")
        print(f"    {'sum':44s} {'':20s} {total:8.1f} us", flush=True)
        del cache
        torch.cuda.empty_cache()

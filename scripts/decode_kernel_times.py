"""Where one CUDA decode attend goes, kernel by kernel: eager attends (no append; L2 flushed
before each) under torch.profiler, each kernel's mean device duration, and the graphed attend's
median time beside it. The durations overlap where programmatic dependent launch lets a kernel
start before its predecessor ends, so their sum can exceed the graphed time.

The cache is the decode protocol's synthetic one (benchmarks/decode.py `synthetic_problem`:
peaked attention with logit std 3, key offsets, a sink key; built as the protocol's fold arm
builds it, prefill and max_len L + 64), so the screened split sees the protocol's live and
refine fractions; the step's read statistics are printed beside the times. `--plain` keeps the
cache of sessions <= 15 (q, k ~ N(0, 1), v ~ N(1, 1): nearly every key live at depth 16, few
refined), for comparisons with older logs.

python scripts/decode_kernel_times.py             B1 L32K, B32 L8K, B128 L4K; H 64 / Hkv 8, D 128
python scripts/decode_kernel_times.py --g4        H 32 / Hkv 8
python scripts/decode_kernel_times.py --shapes "1,2048,9,3,64;1,8192,9,3,64"   (B,L,H,Hkv,D;...)
python scripts/decode_kernel_times.py --dense-only  depth None only
python scripts/decode_kernel_times.py --screened-only  depth 16 only
python scripts/decode_kernel_times.py --plain  the old cache (above)
python scripts/decode_kernel_times.py --capture 14 --shapes "8,8192;32,8192"  a real-model
    capture's layer (benchmarks/captures.py; the first capture found): each shape "B,L" is the
    capture's request at length L repeated B times (heads and head dim are the capture's), so a
    batch has the real cache's live fractions (as scripts/decode_env_ab.py --capture)
--v8: caches with V in two E4M3 planes
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

PLAIN = "--plain" in sys.argv
if not PLAIN:  # the protocol's cache (the repository root on sys.path: run from it)
    sys.path.insert(0, ".")
    from benchmarks.arms.fold import build_cache
    from benchmarks.decode import synthetic_problem

dev = torch.device("cuda")
H_ = 32 if "--g4" in sys.argv else 64
SHAPES = ((1, 32768, H_, 8, 128), (32, 8192, H_, 8, 128), (128, 4096, H_, 8, 128))
if "--shapes" in sys.argv:
    SHAPES = tuple(tuple(int(x) for x in s.split(","))
                   for s in sys.argv[sys.argv.index("--shapes") + 1].split(";") if s)
V8 = "--v8" in sys.argv
CAPTURE_LAYER = sys.argv[sys.argv.index("--capture") + 1] if "--capture" in sys.argv else ""
CAP = None
if CAPTURE_LAYER:
    from benchmarks.decode import capture_problem, capture_shapes, first_capture_or_exit

    CAP = first_capture_or_exit()
    SHAPES = capture_shapes(CAP, SHAPES)
DEPTHS = ((None,) if "--dense-only" in sys.argv else (16.0,) if "--screened-only" in sys.argv
          else (None, 16.0))
REPS = 10


def short(name):
    m = re.search(r"(decode_\w+|append_\w+)(<[^>]*>)?", name)
    if m:
        return m.group(0)
    return name[:40]


def make_cache(B, L, H, Hkv, D, depth):
    """(cache, q): the protocol's synthetic problem in its fold arm's cache, or (--plain) the
    old one."""
    if CAP is not None:
        prob = capture_problem(CAP, CAPTURE_LAYER, L, B)
        return build_cache(prob, depth, V8), prob.q
    if not PLAIN:
        prob = synthetic_problem(B, L, H, Hkv, D)
        return build_cache(prob, depth, V8), prob.q
    torch.manual_seed(0)
    k = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, L, Hkv, D, device=dev, dtype=torch.bfloat16) + 1.0
    q = torch.randn(B, H, D, device=dev, dtype=torch.bfloat16)
    cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=depth, device=dev)
    for b in range(B):
        cache.add_request()
        cache.extend(b, k[b], v[b])
    return cache, q


for B, L, H, Hkv, D in SHAPES:
    for depth in DEPTHS:
        cache, q = make_cache(B, L, H, Hkv, D, depth)
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
        st = cache.stats()
        print(f"B={B} L={L} H={H}/{Hkv} D={D} depth={depth}: graphed attend {t_graph:.1f} us"
              f" ({'plain' if PLAIN else 'capture ' + CAPTURE_LAYER if CAP else 'protocol'}"
              f"{' v8' if V8 else ''} cache: live {st['live_frac']:.3f}, refined"
              f" {st['refine_frac']:.3f}, {st['bytes_per_key']:.0f} bytes/key)", flush=True)
        total = 0.0
        for name, ts in per.items():
            mean = sum(ts) / REPS  # per attend (a kernel may run twice: the guard's pass)
            total += mean
            print(f"    {name:44s} {len(ts) / REPS:4.1f} launches/attend  {mean:8.1f} us/attend")
        print(f"    {'sum':44s} {'':20s} {total:8.1f} us", flush=True)
        del cache, q
        torch.cuda.empty_cache()

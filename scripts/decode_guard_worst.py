"""The guard's worst case: every group of a long batch flagged (a needle key that the front's
sample misses, fp16 queries: Z undershoots, T leaves the window), so pass 1 recomputes every
group: fix-up (exact Z over all keys) and every split. Prints the graphed attend time, the
flagged rows, and the same batch without the needle (nothing flagged) beside it.

python scripts/decode_guard_worst.py [B L H Hkv D]     (default 16 32768 32 8 128)
(needs a GPU and a CUDA build of the library; FOLD_ATTENTION_LIBRARY may name the .so)
"""
import sys

import torch

import fold_attention as fa
from fold_attention.decode import decode_step_cuda
from graph_timing import graphed_median

B, L, H, Hkv, D = (int(x) for x in sys.argv[1:6]) if len(sys.argv) > 5 else (16, 32768, 32, 8, 128)
dev = torch.device("cuda")


torch.manual_seed(2)
u = torch.zeros(D, device=dev)
u[0] = 1.0
w = torch.zeros(D, device=dev)
w[1] = 1.0  # decoys along w (orthogonal to q) fill the heavy-key list ahead of the needle
for needle in (False, True):
    cache = fa.FoldKVCache(B, H, Hkv, D, L, depth=None, dtype=torch.float16, device=dev)
    for b in range(B):
        cache.add_request()
        k = torch.randn(L, Hkv, D, device=dev) * 0.3
        for j in range(100, L - 100, (L - 200) // 10):
            k[j] = 40.0 * w
        if needle:
            k[L // 2 + 131 * b % 1000] = 21.0 * u  # a middle key the sample misses
        cache.extend(b, k.half(), torch.randn(L, Hkv, D, device=dev).half())
    q = (12.0 * u).expand(B, H, D).contiguous().half()
    out = torch.empty(B, H, D, dtype=torch.float16, device=dev)
    lse = torch.empty(B, H, dtype=torch.float32, device=dev)
    t = graphed_median(lambda: decode_step_cuda(cache, q, None, None, out, lse), reps=10)
    st = cache.stats()
    print(f"B={B} L={L} H={H}/{Hkv} D={D} needle={needle}: graphed attend {t:.1f} us, "
          f"fixup rows {st['fixup_rows']} of {st['rows']}", flush=True)
    del cache
    torch.cuda.empty_cache()

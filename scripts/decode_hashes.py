"""Hashes of decode outputs (out and LSE bits) over a fixed set of caches: run it with two libraries
(FOLD_ATTENTION_LIBRARY) or two settings of a knob and compare the lines, to check that a kernel
change that must keep the bits (a schedule, a fast path) does. Each line: the case, then the
sha256 prefix of the output's and the LSE's bytes.

python scripts/decode_hashes.py [--depths none,16] [--quick] [--device cpu] [--repeat N] [--v8]
                                [--window W] [--sinks] [--steps N]

Cases: head dims 64 / 128, group sizes 1, 3, 4, 8 (the dense ring's one-row-block instance) and
16 (two row blocks), bf16 and fp16, ragged lengths with partial last chunks and splits (1, 63,
64, 65, 511, 513, 1000, 2100, 4099 keys), the default cache sizes. --repeat N: the lengths N
times over (a batch of 9 N requests: N >= 15 gives every shape more groups than an H200 has SMs,
the launchers' large-batch forms). --v8: caches with V in two E4M3 planes. --window W: steps with a
sliding window of W keys (window_size=(W - 1, 0)); --sinks: with attention sinks (fixed values).
--steps N: N steps that append a token to every request before the hashed one (the step's fused
writer and heavy list; a v8 value 24x the rest at the second). Needs a GPU and a CUDA build
(of session 21 or later: the package's eager step calls the library's precheck entry point, so an
older library cannot be compared through it).
"""

import sys

import torch

sys.path.insert(0, "tests/python")
from decode_helpers import filled_cache, synth  # noqa: E402

import fold_attention as fa  # noqa: E402
from grad_hashes import digest  # noqa: E402 (scripts/, the script's own folder)


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


DEPTHS = [None if d == "none" else float(d) for d in arg("--depths", "none").split(",")]
LENGTHS = [1, 63, 64, 65, 511, 513, 1000, 2100, 4099] * int(arg("--repeat", "1"))
dev = torch.device(arg("--device", "cuda"))
V8 = "--v8" in sys.argv
WINDOW = int(arg("--window", "0"))
SINKS = "--sinks" in sys.argv
STEPS = int(arg("--steps", "0"))


def main():
    shapes = [(128, 8, 1), (128, 4, 4), (128, 2, 8), (128, 2, 16), (64, 3, 3), (64, 4, 8)]
    dtypes = [torch.bfloat16, torch.float16]
    if "--quick" in sys.argv:
        shapes, dtypes = shapes[1:2] + shapes[4:5], dtypes[:1]
    B, Lmax = len(LENGTHS), max(LENGTHS)
    for D, Hkv, G in shapes:
        for dtype in dtypes:
            q, k, v = synth(B, Hkv, G, D, Lmax, seed=7 + D + G, dtype=dtype)
            for depth in DEPTHS:
                cache = filled_cache(k.to(dev), v.to(dev), LENGTHS, Hkv * G, depth=depth, device=dev, v8=V8,
                                     max_len=Lmax + STEPS)
                extra = {}
                if WINDOW:
                    extra["window_size"] = (WINDOW - 1, 0)
                if SINKS:
                    g = torch.Generator().manual_seed(D + G)
                    extra["sinks"] = (torch.randn(Hkv * G, generator=g) * 2).to(dev)
                g = torch.Generator().manual_seed(100 + D + G)
                for i in range(STEPS):
                    ks, vs = (torch.randn(B, Hkv, D, generator=g) * (24.0 if i == 1 and x else 1.0)
                              for x in (0, 1))
                    fa.fold_attn_with_kvcache(q.to(dev), cache, ks.to(dtype).to(dev), vs.to(dtype).to(dev),
                                              **extra)
                out, lse = fa.fold_attn_with_kvcache(q.to(dev), cache, return_lse=True, **extra)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                name = f"D{D} H{Hkv * G}/{Hkv} {str(dtype).split('.')[-1]} depth={depth}{' v8' if V8 else ''}{f' W{WINDOW}' if WINDOW else ''}{' sinks' if SINKS else ''}{f' steps{STEPS}' if STEPS else ''}"
                print(f"{name:40s} out {digest(out)} lse {digest(lse)}", flush=True)


if __name__ == "__main__":
    main()

"""Decode accuracy on real captures, through the CPU reference backend.

The CUDA decode kernels give the CPU reference's bits (tested on the GPU), so the accuracy of
the algorithm can be measured on any machine. For each capture layer this runs real decode:
the cache is filled with the prompt's first `start` tokens, then every later token is
appended (k_step, v_step) and its real query attends (fold_attn_with_kvcache), exactly as in
generation. Each step's output (all heads) is compared with a float64 reference of the same
step; reported per layer and configuration: the median and worst relative Frobenius error,
as a multiple of the step's bf16 floor (the exact output rounded once to bf16) and next to
torch SDPA's own bf16 error on the same step (the baseline band of MEASURING.md), the live
fraction and the bytes read per key.

    python -m benchmarks.decode_accuracy [--start 7680] [--stride 1] [--depths none,16,12]
        [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from . import captures, metrics
from .reference import decode_reference


def _sdpa_bf16(q, k, v, scale):
    """torch SDPA in bf16 on the CPU: q (1, H, D), k/v (1, Hkv, L, D) -> (1, H, D)."""
    out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=scale, enable_gqa=True)
    return out.squeeze(2)


def run_layer(cap, layer: str, depth, start: int, stride: int):
    import fold_attention as fa

    m = cap.meta
    H, Hkv, D = m["n_heads"], m["n_kv_heads"], m["head_dim"]
    scale = m.get("softmax_scale", D ** -0.5)
    positions = [p for p in cap.query_positions if p >= start][::stride]
    last = positions[-1]
    K, V = cap.kv(layer, last + 1)
    cache = fa.FoldKVCache(1, H, Hkv, D, last + 1, depth=depth, softmax_scale=scale,
                           dtype=torch.bfloat16)
    cache.add_request(length=last + 1)
    cache.extend(0, K[:positions[0]], V[:positions[0]])
    rows = []
    filled = positions[0]
    for pos in positions:
        if pos > filled:  # tokens between sampled positions enter the cache without a query
            cache.extend(0, K[filled:pos], V[filled:pos])
        q = cap.q_at(layer, pos).unsqueeze(0)  # (1, H, D) bf16
        out = fa.fold_attn_with_kvcache(q, cache, K[pos:pos + 1], V[pos:pos + 1])
        filled = pos + 1
        kk = K[:pos + 1].transpose(0, 1).unsqueeze(0)
        vv = V[:pos + 1].transpose(0, 1).unsqueeze(0)
        ref = decode_reference(q, kk, vv, scale)
        floor = metrics.bf16_floor(ref)["err"]
        sdpa = metrics.rel_fro_error(_sdpa_bf16(q, kk, vv, scale), ref)
        st = cache.stats()
        rows.append({"pos": pos, "err": metrics.rel_fro_error(out, ref), "floor": floor,
                     "sdpa_bf16": sdpa, "live": st["live_frac"], "bytes_per_key": st["bytes_per_key"]})
    return rows


def summarise(rows):
    ratio = [r["err"] / r["floor"] for r in rows]
    sd = [r["sdpa_bf16"] / r["floor"] for r in rows]
    return {
        "steps": len(rows),
        "err_median": statistics.median(r["err"] for r in rows),
        "err_max": max(r["err"] for r in rows),
        "x_floor_median": statistics.median(ratio),
        "x_floor_max": max(ratio),
        "sdpa_bf16_x_floor_median": statistics.median(sd),
        "sdpa_bf16_x_floor_max": max(sd),
        "within_sdpa_band_frac": sum(r["err"] <= r["sdpa_bf16"] for r in rows) / len(rows),
        "live_frac_mean": statistics.fmean(r["live"] for r in rows),
        "bytes_per_key_mean": statistics.fmean(r["bytes_per_key"] for r in rows),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=int, default=7680, help="first decoded position (default 7680)")
    ap.add_argument("--stride", type=int, default=1, help="use every n-th stored query position")
    ap.add_argument("--depths", default="none,16,12")
    ap.add_argument("--out", default=None, help="write the summary as JSON")
    args = ap.parse_args(argv)
    caps = captures.load_all()
    if not caps:
        print("no capture found: python -m benchmarks.make_capture (see benchmarks/README.md)")
        return 1
    depths = [None if d.strip().lower() == "none" else float(d) for d in args.depths.split(",")]
    result = {"capture_id": caps[0].capture_id, "start": args.start, "stride": args.stride,
              "backend": "CPU reference (the CUDA kernels give its bits)", "layers": {}}
    print(f"capture {caps[0].capture_id}: {caps[0].meta['model']}")
    print("layer depth   steps  err median (x floor)  err max (x floor)  SDPA bf16 median/max x floor"
          "  <= SDPA  live  B/key")
    for layer in sorted(caps[0].layers, key=int):
        for depth in depths:
            t0 = time.time()
            s = summarise(run_layer(caps[0], layer, depth, args.start, args.stride))
            result["layers"].setdefault(layer, {})["dense" if depth is None else f"depth{depth:g}"] = s
            print(f"{layer:>5} {'none' if depth is None else f'{depth:g}':>5} {s['steps']:>7}  "
                  f"{s['err_median']:.2e} ({s['x_floor_median']:.2f}x)    {s['err_max']:.2e} "
                  f"({s['x_floor_max']:.2f}x)     {s['sdpa_bf16_x_floor_median']:.2f} / "
                  f"{s['sdpa_bf16_x_floor_max']:.2f}           {100 * s['within_sdpa_band_frac']:5.1f}%  "
                  f"{s['live_frac_mean']:.3f} {s['bytes_per_key_mean']:5.0f}  ({time.time() - t0:.0f} s)",
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

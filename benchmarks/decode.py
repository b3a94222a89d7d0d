"""Decode suite: one query token per request against a full cache.

Per case: latency of every arm (graph-replayed, L2 flushed, rotated), its error
against one FP32 reference (relative Frobenius + worst row) and the bf16 floor,
bytes read per key per KV head, read bandwidth and % of the read ceiling measured
in the same run. Our arm sweeps depth (None = dense, 8..24 binades) and v8; the
baselines are SDPA (cuDNN, FLASH, EFFICIENT; tuned over GQA handling),
FlexAttention, FlashInfer and FA3 where importable.

Cases: synthetic caches at D=128 (G = 4, 8, 16; the MEASURING.md table's shapes)
and real-model captures (SmolLM2-135M post-RoPE Q/K/V, D=64, G=3; see
benchmarks/make_capture.py), the query being the real token at position L-1: one
request, and (CAPTURE_BATCH) the same request repeated over a batch at the longest
context, so that a large batch is read with the real model's live fractions.

Accuracy rule, fixed before the run: our speedup is reported at the default
depth (16) with v8 off; "band" is the largest error among the bf16 baselines on
the case, "strict" the smallest.

  python -m benchmarks.decode [--quick] [--out DIR] [--budget-s S]
"""
from __future__ import annotations

import argparse
import math
import os
from typing import Any, Dict

import torch

from . import device as dev
from . import bytes_model, captures, ceiling, harness, metrics, runner
from .arms import fold, flash, flashinfer, flex, sdpa
from .arms.problems import DecodeProblem
from .reference import decode_reference

# (B, L, H, H_kv, D): MEASURING.md's decode table (group sizes G = H/H_kv of 4, 8, 16)
# plus one more G=16 case.
FULL_SHAPES = [
    (1, 4096, 32, 8, 128), (1, 32768, 32, 8, 128), (8, 16384, 32, 8, 128), (32, 8192, 32, 8, 128),
    (128, 4096, 32, 8, 128), (16, 16384, 32, 4, 128), (64, 16384, 64, 8, 64), (32, 32768, 32, 2, 128),
    (8, 16384, 64, 4, 128),
]
QUICK_SHAPES = [(1, 32768, 32, 8, 128), (8, 16384, 32, 8, 128), (32, 8192, 32, 8, 128),
                (128, 4096, 32, 8, 128), (16, 16384, 32, 4, 128), (32, 32768, 32, 2, 128)]
DRY_SHAPES = [(2, 256, 8, 2, 32), (1, 512, 4, 4, 16)]
CAPTURE_CONTEXTS_FULL = [1024, 2048, 4096, 8192]
CAPTURE_CONTEXTS_QUICK = [2048, 8192]
CAPTURE_BATCH = (32, 8192)  # (batch, context) of the repeated-request capture cases
DEPTHS_FULL = (None, 8, 12, 16, 20, 24)
DEPTHS_QUICK = (None, 8, 12, 16, 20, 24)


def synthetic_problem(B, L, H, Hkv, D, seed=0, logit_std=3.0):
    """Random bf16 cache with peaked attention: q ~ N(0, logit_std^2) so that the
    scaled logits q.k/sqrt(D) have std ~logit_std (uniform attention would make
    depth cuts meaningless; the SmolLM2 captures show 2.6-5.4 at the last position
    of 2K-8K contexts), K with per-channel offsets (real keys have them) and a heavy
    first key (an attention sink: the captures' deeper layers put 0.3-0.6 of the
    mass on key 0)."""
    g = dev.generator(seed)
    k = torch.randn(B, Hkv, L, D, device=dev.DEVICE, dtype=torch.bfloat16, generator=g)
    k += torch.randn(1, Hkv, 1, D, device=dev.DEVICE, dtype=torch.bfloat16, generator=g) * 0.5
    v = torch.randn(B, Hkv, L, D, device=dev.DEVICE, dtype=torch.bfloat16, generator=g)
    q = (torch.randn(B, H, D, device=dev.DEVICE, dtype=torch.float32, generator=g) * logit_std)
    G = H // Hkv
    # sink: key 0 of each KV head aligned with its group's mean query
    # scaled so that the group's mean query gives it a logit of ~10: a few percent
    # of the mass at 32K keys, a quarter at 4K
    qm = q.view(B, Hkv, G, D).mean(2)
    c = 10.0 * math.sqrt(D) / qm.norm(dim=-1, keepdim=True).pow(2).clamp_min(1e-6)
    k[:, :, 0, :] = (qm * c).to(torch.bfloat16)
    return DecodeProblem(q=q.to(torch.bfloat16), k=k, v=v,
                         extra={"kind": "synthetic", "seed": seed, "logit_std": logit_std})


def first_capture_or_exit(flag: str = "--capture"):
    """The first capture found (captures.load_all), or exit saying how to make one (scripts)."""
    caps = captures.load_all()
    if not caps:
        raise SystemExit(f"{flag}: no capture found (python -m benchmarks.make_capture)")
    return caps[0]


def capture_shapes(cap, shapes):
    """(B, L, ...) shapes as (B, L, H, Hkv, D) with the capture's heads and head dim."""
    m = cap.meta
    return [(s[0], s[1], m["n_heads"], m["n_kv_heads"], m["head_dim"]) for s in shapes]


def capture_problem(cap, layer: str, L: int, batch: int = 1):
    """The capture's request at length L (its query the token at L - 1), repeated `batch`
    times (separate copies: a batch read with the real cache's live fractions)."""
    q = cap.q_at(layer, L - 1).unsqueeze(0).to(dev.DEVICE)          # (1, H, D)
    k, v = cap.kv(layer, L)                                   # (L, Hkv, D)
    k = k.transpose(0, 1).unsqueeze(0).contiguous().to(dev.DEVICE)    # (1, Hkv, L, D)
    v = v.transpose(0, 1).unsqueeze(0).contiguous().to(dev.DEVICE)
    if batch > 1:
        q, k, v = (x.expand(batch, *x.shape[1:]).contiguous() for x in (q, k, v))
    return DecodeProblem(q=q, k=k, v=v, extra={"kind": "capture", "capture_id": cap.capture_id,
                                               "layer": int(layer), "position": L - 1})


def case_name(p: DecodeProblem) -> str:
    base = f"B{p.batch}-L{p.context}-H{p.heads}/{p.kv_heads}-D{p.head_dim}"
    if p.extra.get("kind") == "capture":
        return f"capture:{p.extra['capture_id'][:8]}:layer{p.extra['layer']}:" + base
    return "synthetic:" + base


def run_case(p: DecodeProblem, args, ceiling_tbs, depths, want_flex: bool, twin: bool,
             want_flashinfer: bool = True) -> Dict[str, Any]:
    ref = decode_reference(p.q, p.k, p.v, p.softmax_scale)
    floor = metrics.bf16_floor(ref)
    if want_flashinfer:
        fi_kw = {} if not args.quick else {"page_sizes": (16,), "split_modes": (False,)}
        fi_build = lambda: flashinfer.decode_candidates(p, **fi_kw)  # noqa: E731
    else:
        def fi_build():
            raise harness.Unavailable("off in --quick mode (JIT compiles cost device time): set "
                                      "FOLD_BENCH_FLASHINFER=1 or run without --quick")
    builders = [("sdpa", lambda: sdpa.decode_candidates(p)),
                ("flashinfer", fi_build),
                ("fa3", lambda: flash.decode_candidates(p)),
                ("fold", lambda: fold.decode_candidates(p, depths=depths))]
    if want_flex:
        builders.insert(1, ("flex", lambda: flex.decode_candidates(p)))
    cands, missing = runner.collect(builders)
    ok, recs = runner.check(cands, ref)
    rounds = args.rounds or (8 if args.quick else 20)
    twin_name = harness.twin_choice(ok) if twin else None
    stats = harness.measure(ok, rounds=rounds, samples=args.samples, flush=not args.no_flush,
                            twin=twin_name, max_seconds=30.0)
    D, B, Hkv, L, H = p.head_dim, p.batch, p.kv_heads, p.context, p.heads
    for c in cands:
        r = recs[c.name]
        s = stats.get(c.name)
        if s is not None:
            if s.get("status") != "ok":
                r["status"] = s["status"]
            else:
                r.update({k: s[k] for k in ("median_us", "p10_us", "p90_us", "min_us", "rounds", "graph",
                                              "graph_error")})
                if "noise_floor" in s:
                    r["noise_floor"] = s["noise_floor"]
        if c.arm == "fold":
            # the cache's own counters, read after check() ran a step on it
            st = (fold._cache_stats(c.meta["cache"]) if c.meta.get("cache") is not None else {}) or \
                c.meta.get("stats") or {}
            live = st.get("live_frac", st.get("live_fraction"))
            refine = st.get("refine_frac", st.get("refine_fraction"))
            v_refine = st.get("v_refine_frac")
            r["stats"] = st
            r["live_frac"] = live
            bpk = bytes_model.fold_bytes_per_key(D, live if live is not None else 1.0, refine,
                                                 v8=bool(c.config.get("v8")), v_refine_frac=v_refine)
            r["bytes_per_key_assumed_dense"] = live is None
        else:
            bpk = c.meta.get("bytes_per_key", bytes_model.bf16_kv_bytes_per_key(D))
        r["bytes_per_key"] = bpk
        if "median_us" in r:
            nb = bytes_model.case_bytes(B, Hkv, L, bpk, D, H)
            r["bytes"] = nb
            r["tbs"] = bytes_model.bandwidth_tbs(nb, r["median_us"] * 1e-6)
            r["pct_of_ceiling"] = bytes_model.pct_of_ceiling(r["tbs"], ceiling_tbs)
    # twin (noise floor) record
    for name, s in stats.items():
        if "#twin" in name and s.get("status") == "ok":
            recs[name] = {"arm": s["arm"], "config": s["config"], "status": "ok", "median_us": s["median_us"],
                          "twin_of": twin_name}
    # per-arm winners (baselines) and the accuracy band
    winners = {}
    for name, r in recs.items():
        if r.get("status") != "ok" or "median_us" not in r or r["arm"] == "fold" or "#twin" in r["arm"]:
            continue
        a = r["arm"]
        if a not in winners or r["median_us"] < recs[winners[a]]["median_us"]:
            winners[a] = name
    base_err = {a: recs[n]["error"]["err"] for a, n in winners.items()}
    band = metrics.error_band(base_err)
    all_err = {n: r["error"]["err"] for n, r in recs.items() if r.get("status") == "ok" and "error" in r}
    flags = metrics.outlier_flags(all_err)
    for n, f in flags.items():
        recs[n]["unranked_error_outlier"] = f
    fastest = None
    for a, n in winners.items():
        if flags.get(n):
            continue
        if fastest is None or recs[n]["median_us"] < recs[fastest]["median_us"]:
            fastest = n
    ours = None
    for n, r in recs.items():
        if r["arm"] == "fold" and r["config"].get("depth") == fold.DEFAULT_DEPTH and \
                r["config"].get("v8") == fold.DEFAULT_V8:
            ours = n
    summary = {"fastest_baseline": None, "ours": None}
    if fastest:
        summary["fastest_baseline"] = {"arm": recs[fastest]["arm"], "candidate": fastest,
                                       "us": recs[fastest]["median_us"]}
    if ours and recs[ours].get("status") == "ok" and "median_us" in recs[ours]:
        o = recs[ours]
        summary["ours"] = {"candidate": ours, "us": o["median_us"], "error": o["error"]["err"],
                           "within_band": (band["band"] is not None and o["error"]["err"] <= band["band"]),
                           "pct_of_ceiling": o.get("pct_of_ceiling")}
        if fastest:
            summary["speedup"] = recs[fastest]["median_us"] / o["median_us"]
    elif ours:
        summary["ours_status"] = recs[ours].get("status")
    return {"case": case_name(p), "batch": B, "context": L, "heads": H, "kv_heads": Hkv, "head_dim": D,
            "source": p.extra, "ceiling_tbs": ceiling_tbs, "bf16_floor": floor, "band": band,
            "winners": winners, "arms": recs, "unavailable": missing, "summary": summary,
            "rule": {"default_depth": fold.DEFAULT_DEPTH, "default_v8": fold.DEFAULT_V8}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.common_args(ap)
    ap.add_argument("--flex", action="store_true", help="include FlexAttention (compiles per shape)")
    ap.add_argument("--no-captures", action="store_true")
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--ceiling-gib", type=float, default=4.0)
    args = ap.parse_args(argv)
    runner.require_cuda()
    shapes = QUICK_SHAPES if args.quick else FULL_SHAPES
    if dev.DRY:
        shapes = DRY_SHAPES
    depths = DEPTHS_QUICK if args.quick else DEPTHS_FULL
    caps = [] if args.no_captures else captures.load_all()
    config = {"quick": args.quick, "shapes": shapes, "depths": list(depths),
              "captures": [c.summary() for c in caps], "flush": not args.no_flush}
    w = runner.open_writer("decode", args, config)
    budget = harness.Budget(args.budget_s)
    want_fi = os.environ.get("FOLD_BENCH_FLASHINFER", "0" if args.quick else "1") == "1"
    ceil = ceiling.measure_ceiling(args.ceiling_gib)
    w.note({"ceiling": ceil})
    ceiling_tbs = ceil.get("tbs")
    print(f"read ceiling: {ceiling_tbs} TB/s ({ceil.get('method')})", flush=True)
    if not caps and not args.no_captures:
        w.note({"captures": "none found: run python -m benchmarks.make_capture (see benchmarks/README.md)"})
    work = [("synthetic", s) for s in shapes] if not args.no_synthetic else []
    for c in caps:
        contexts = CAPTURE_CONTEXTS_QUICK if args.quick else CAPTURE_CONTEXTS_FULL
        for layer in c.layer_ids:
            for L in contexts:
                if L <= c.n_tokens and (L - 1) in c.query_positions:
                    work.append(("capture", (c, layer, L)))
            B, L = CAPTURE_BATCH
            if L <= c.n_tokens and (L - 1) in c.query_positions:
                work.append(("capture", (c, layer, L, B)))
    for i, (kind, spec) in enumerate(harness.progress(work, total=len(work), desc="decode")):
        if budget.exhausted():
            w.note({"skipped": str(spec if kind == "synthetic" else spec[1:]), "why": "budget"})
            continue
        try:
            p = synthetic_problem(*spec) if kind == "synthetic" else capture_problem(*spec)
            rec = run_case(p, args, ceiling_tbs, depths, args.flex, twin=(i % 3 == 0), want_flashinfer=want_fi)
            w.case(rec)
            s = rec["summary"]
            fb = s.get("fastest_baseline") or {}
            print(f"  {rec['case']}: fastest {fb.get('arm')} {fb.get('us', float('nan')):.1f} us, "
                  f"ours {s.get('ours') or s.get('ours_status')}", flush=True)
        except Exception as e:
            w.note({"case_failed": str(spec if kind == "synthetic" else spec[1:]),
                    "error": harness.unavailable_reason(e)})
        finally:
            p = None
            dev.empty_cache()
    print(f"decode: {w.count} cases -> {', '.join(w.paths)}")


if __name__ == "__main__":
    main()

"""Generate suite: multi-step decode through FoldKVCache on real-model captures.

Per capture layer: prefill the first P = S - steps tokens, then decode `steps`
tokens one at a time, each step appending the real token's K/V and querying with
its real post-RoPE Q (teacher-forced: the captured sequence, not sampled tokens).
Every step's output is compared with an FP32 reference over keys 0..t: per-step
relative error (median, max, last) for every configuration of ours (depth, v8)
and for the bf16 baselines (SDPA over a contiguous bf16 cache that grows by one
slot per step), which give the accuracy band. Then latency: the whole loop of
`steps` appends + attends timed with CUDA events (eager: the cache's state changes
every step, so it is not graph-replayed), reported per step. Our cache is built and prefilled
before the timed loop (as the baselines' contiguous cache is), so the time is the steps'.

The prefill's queries are not in the capture (only decode positions are kept):
ours is prefilled with random queries; the prefill's output is not scored.

  python -m benchmarks.generate [--quick] [--steps N] [--out DIR]
  FOLD_GENERATE_LAYERS="27,2": only these capture layers, in this order (diagnostics)
"""
from __future__ import annotations

import argparse
import os
import statistics
from typing import Any, Dict

import torch

from . import device as dev
from . import captures, harness, metrics, runner
from .arms import fold, sdpa
from .reference import decode_reference


def _ref_steps(q_steps, k, v, P):
    """fp32 reference for each step j: query q_steps[j] over keys 0..P+j."""
    refs = []
    for j in range(q_steps.shape[0]):
        t = P + j + 1
        refs.append(decode_reference(q_steps[j:j + 1], k[:, :, :t], v[:, :, :t])[0])
    return torch.stack(refs)


def _baseline_loop(backend_name, q_steps, k_full, v_full, P, S):
    """SDPA over a contiguous bf16 cache; each step writes slot t then attends [0, t]."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    be = sdpa.BACKENDS[backend_name]
    Hkv = k_full.shape[1]
    H, D = q_steps.shape[1], q_steps.shape[2]
    G = H // Hkv
    kc = torch.zeros_like(k_full)
    vc = torch.zeros_like(v_full)
    kc[:, :, :P] = k_full[:, :, :P]
    vc[:, :, :P] = v_full[:, :, :P]

    def loop(collect=True, state=None):
        outs = []
        for j in range(S - P):
            t = P + j
            kc[:, :, t] = k_full[:, :, t]
            vc[:, :, t] = v_full[:, :, t]
            with sdpa_kernel([be]):
                o = F.scaled_dot_product_attention(q_steps[j].view(1, Hkv, G, D), kc[:, :, :t + 1], vc[:, :, :t + 1])
            if collect:
                outs.append(o.reshape(H, D))
        return torch.stack(outs) if collect else None
    return loop


def _fold_loop(fa, depth, v8, q_steps, k_full, v_full, P, S):
    H, D = q_steps.shape[1], q_steps.shape[2]
    Hkv = k_full.shape[1]

    def fresh():
        cache = fa.FoldKVCache(batch=1, n_heads=H, n_kv_heads=Hkv, head_dim=D, max_len=S + 64, depth=depth, v8=v8,
                                 dtype=q_steps.dtype, device=q_steps.device)
        kp = k_full[0, :, :P].transpose(0, 1).contiguous()
        vp = v_full[0, :, :P].transpose(0, 1).contiguous()
        qp = torch.randn(P, H, D, device=kp.device, dtype=kp.dtype)
        cache.prefill(qp, kp, vp, torch.tensor([0, P], dtype=torch.int32, device=kp.device))
        return cache

    def loop(collect=True, cache=None):
        cache = fresh() if cache is None else cache
        outs = []
        for j in range(S - P):
            t = P + j
            ks = k_full[:, :, t].reshape(1, 1, Hkv, D)
            vs = v_full[:, :, t].reshape(1, 1, Hkv, D)
            o = fold.decode_step(fa, cache, q_steps[j:j + 1], ks, vs)
            if collect:
                outs.append(o[0])
        return torch.stack(outs) if collect else None
    loop.prepare = fresh  # a new cache holding the prefix, built outside the timed loop
    return loop


def run_layer(cap, layer: str, steps: int, configs, reps: int) -> Dict[str, Any]:
    S = cap.n_tokens
    P = S - steps
    k, v = cap.kv(layer, S)
    k = k.transpose(0, 1).unsqueeze(0).contiguous().to(dev.DEVICE)    # (1, Hkv, S, D)
    v = v.transpose(0, 1).unsqueeze(0).contiguous().to(dev.DEVICE)
    q_steps = torch.stack([cap.q_at(layer, P + j) for j in range(steps)]).to(dev.DEVICE)  # (steps, H, D)
    ref = _ref_steps(q_steps, k, v, P)
    floor = [metrics.rel_fro_error(ref[j].to(torch.bfloat16).float(), ref[j]) for j in range(steps)]
    loops = {}
    for b in sdpa.default_backends():
        loops[f"sdpa.{b}"] = ({"arm": f"sdpa.{b}", "config": {"gqa": "pack"}}, _baseline_loop(b, q_steps, k, v, P, S))
    missing = {}
    try:
        fa = fold.import_fold()
        for depth, v8 in configs:
            loops[f"fold[depth={depth},v8={v8}]"] = ({"arm": "fold", "config": {"depth": depth, "v8": v8}},
                                                     _fold_loop(fa, depth, v8, q_steps, k, v, P, S))
    except Exception as e:
        missing["fold"] = harness.unavailable_reason(e)
    arms: Dict[str, Any] = {}
    for name, (info, loop) in loops.items():
        rec = dict(info)
        try:
            outs = loop(True)
            dev.sync()
            errs = [metrics.rel_fro_error(outs[j], ref[j]) for j in range(steps)]
            worst = [metrics.worst_row_error(outs[j], ref[j]) for j in range(steps)]
            rec.update(status="ok", step_err=errs, err_median=statistics.median(errs), err_max=max(errs),
                       err_last=errs[-1], worst_row_max=max(worst), nonfinite=metrics.nonfinite_count(outs))
            times = []
            for _ in range(reps):
                state = loop.prepare() if hasattr(loop, "prepare") else None
                harness.flusher()()
                dev.sync()  # (both arms start their loop with an idle device)
                a, b = harness.Timer(), harness.Timer()
                a.record()
                loop(False, state)
                b.record()
                dev.sync()
                times.append(a.elapsed_us(b) / steps)
            rec.update(us_per_step=statistics.median(times), us_per_step_all=times, graph=False)
        except Exception as e:
            rec["status"] = harness.unavailable_reason(e)
            try:
                dev.sync()
            except Exception:
                pass
        arms[name] = rec
    base = {n: r["err_median"] for n, r in arms.items() if r.get("status") == "ok" and r["arm"].startswith("sdpa")}
    return {"case": f"capture:{cap.capture_id[:8]}:layer{layer}:P{P}+{steps}", "capture_id": cap.capture_id,
            "layer": int(layer), "prefill": P, "steps": steps, "heads": cap.meta["n_heads"],
            "kv_heads": cap.meta["n_kv_heads"], "head_dim": cap.meta["head_dim"],
            "bf16_floor_median": statistics.median(floor), "band": metrics.error_band(base),
            "arms": arms, "unavailable": missing}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.common_args(ap)
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args(argv)
    runner.require_cuda()
    steps = args.steps or (64 if args.quick else 256)
    configs = [(None, False), (16, False), (16, True)] if args.quick else \
        [(d, v8) for v8 in (False, True) for d in (None, 8, 12, 16, 20, 24)]
    caps = captures.load_all()
    w = runner.open_writer("generate", args, {"quick": args.quick, "steps": steps,
                                              "configs": [list(c) for c in configs],
                                              "captures": [c.summary() for c in caps]})
    if not caps:
        w.note({"captures": "none found: run python -m benchmarks.make_capture (see benchmarks/README.md)"})
        print("generate: no capture found (python -m benchmarks.make_capture)")
        return
    budget = harness.Budget(args.budget_s)
    work = [(c, layer) for c in caps for layer in c.layer_ids]
    order = os.environ.get("FOLD_GENERATE_LAYERS")  # e.g. "27,2": these layers, in this order
    if order:
        work = [(c, layer) for layer in order.split(",") for c in caps if layer in c.layer_ids]
    for cap, layer in harness.progress(work, total=len(work), desc="generate"):
        if budget.exhausted():
            w.note({"skipped": f"{cap.capture_id}:{layer}", "why": "budget"})
            continue
        st = min(steps, len([p for p in cap.query_positions if p >= cap.n_tokens - steps]))
        try:
            rec = run_layer(cap, layer, st, configs, reps=2 if args.quick else 5)
            w.case(rec)
            ok = {n: f"{r['err_median']:.2e}" for n, r in rec["arms"].items() if r.get("status") == "ok"}
            print(f"  {rec['case']}: median step error {ok}", flush=True)
        except Exception as e:
            w.note({"case_failed": f"{cap.capture_id}:{layer}", "error": harness.unavailable_reason(e)})
        dev.empty_cache()
    print(f"generate: {w.count} cases -> {', '.join(w.paths)}")


if __name__ == "__main__":
    main()

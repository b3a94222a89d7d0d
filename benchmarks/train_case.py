"""One training case (forward or backward), measured under the protocol."""
from __future__ import annotations

from typing import Any, Dict

from . import device as dev
from . import flops, harness, metrics, runner, training
from .arms.problems import TrainProblem


def run_train_case(p: TrainProblem, mode: str, args, want_flex: bool, twin: bool = False) -> Dict[str, Any]:
    ref = training.reference(p)
    if mode == "fwd":
        ref_t, names = ref[0], None
        floor = {"out": metrics.bf16_floor(ref[0])}
    else:
        ref_t, names = tuple(ref[1:]), ["dq", "dk", "dv"]
        floor = {n: metrics.bf16_floor(r) for n, r in zip(names, ref_t)}
    del ref
    with harness.on_side_stream():
        cands, missing = runner.collect(training.builders(p, mode, want_flex))
    ok, recs = runner.check(cands, ref_t, names, repeats=2 if mode == "bwd" else 1)
    del ref_t
    rounds = args.rounds or (6 if args.quick else 15)
    twin_name = harness.twin_choice(ok) if twin else None
    stats = harness.measure(ok, rounds=rounds, samples=args.samples, flush=not args.no_flush, twin=twin_name,
                            max_seconds=45.0)
    f = training.fwd_flops(p) * (2.5 if mode == "bwd" else 1.0)
    for c in cands:
        r = recs[c.name]
        s = stats.get(c.name)
        if s is None:
            continue
        if s.get("status") != "ok":
            r["status"] = s["status"]
            continue
        r.update({k: s[k] for k in ("median_us", "p10_us", "p90_us", "rounds", "graph", "graph_error")})
        r["round_us"] = s["round_us"]
        r["tflops"] = flops.tflops(f, s["median_us"] * 1e-6)
        if "noise_floor" in s:
            r["noise_floor"] = s["noise_floor"]
        # deterministic = a declared deterministic mode whose repeat was bit-identical
        r["deterministic"] = bool(c.deterministic and r.get("repeat_identical", mode == "fwd"))
    key = "out" if mode == "fwd" else "dq"

    def err_of(r):
        e = r.get("error", {})
        return e.get("err") if mode == "fwd" else max(e[n]["err"] for n in ("dq", "dk", "dv"))

    timed = {n: r for n, r in recs.items() if r.get("status") == "ok" and "median_us" in r}
    flags = metrics.outlier_flags({n: err_of(r) for n, r in timed.items()})
    for n, fl in flags.items():
        recs[n]["unranked_error_outlier"] = fl
    winners: Dict[str, str] = {}
    for n, r in timed.items():
        a = r["arm"]
        if flags.get(n):
            continue
        if a not in winners or r["median_us"] < recs[winners[a]]["median_us"]:
            winners[a] = n

    def fastest(pred):
        best = None
        for a, n in winners.items():
            if a == "fold" or not pred(recs[n]):
                continue
            if best is None or recs[n]["median_us"] < recs[best]["median_us"]:
                best = n
        return best

    summ: Dict[str, Any] = {}
    if mode == "fwd":
        fb = fastest(lambda r: True)
        summ["fastest"] = {"arm": recs[fb]["arm"], "candidate": fb, "tflops": recs[fb]["tflops"]} if fb else None
    else:
        fnd = fastest(lambda r: not r.get("deterministic"))
        fd = fastest(lambda r: r.get("deterministic"))
        summ["fastest_nondeterministic"] = ({"arm": recs[fnd]["arm"], "candidate": fnd,
                                             "tflops": recs[fnd]["tflops"]} if fnd else None)
        summ["fastest_deterministic"] = ({"arm": recs[fd]["arm"], "candidate": fd, "tflops": recs[fd]["tflops"]}
                                         if fd else None)
    ours = winners.get("fold")
    if ours:
        o = recs[ours]
        summ["ours"] = {"candidate": ours, "tflops": o["tflops"], "bit_identical": o.get("repeat_identical"),
                        "error": o.get("error")}
        for label in (("fastest",) if mode == "fwd" else ("fastest_nondeterministic", "fastest_deterministic")):
            tgt = summ.get(label)
            if tgt:
                # throughput ratio ours/theirs = median over rounds of t_theirs / t_ours
                summ[f"ratio_vs_{label.replace('fastest_', '') if label != 'fastest' else 'fastest'}"] = \
                    harness.ratio(recs[tgt["candidate"]]["round_us"], o["round_us"])
    else:
        fo = [r for r in recs.values() if r["arm"] == "fold"]
        summ["ours_status"] = fo[0]["status"] if fo else missing.get("fold", "unavailable: not built")
    for r in recs.values():
        r.pop("round_us", None)
    shape = {"varlen": p.seqlens} if p.varlen else {"batch": p.q.shape[0], "seqlen": p.q.shape[1]}
    return {"case": training.case_name(p), "mode": mode, **shape, "heads": p.heads, "kv_heads": p.kv_heads,
            "head_dim": p.head_dim, "causal": p.causal, "flops": f, "bf16_floor": floor, "error_key": key,
            "arms": recs, "winners": winners, "unavailable": missing, "summary": summ}


def train_suite(suite: str, mode: str, argv=None, doc: str = ""):
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.common_args(ap)
    ap.add_argument("--flex", choices=["all", "first", "none"], default=None,
                    help="FlexAttention on every shape, the first only (quick default) or none")
    ap.add_argument("--no-varlen", action="store_true")
    ap.add_argument("--shapes", choices=["quick", "full", "issue"], default=None,
                    help="shape list: quick (--quick's default), full (the default) or issue (the training "
                         "issue's six shapes and 16-sequence varlen mix)")
    ap.add_argument("--masks", choices=["causal", "full", "both"], default="causal",
                    help="causal (default), non-causal, or both for every shape")
    args = ap.parse_args(argv)
    runner.require_cuda()
    which = args.shapes or ("quick" if args.quick else "full")
    shapes = {"quick": training.QUICK_SHAPES, "full": training.FULL_SHAPES, "issue": training.ISSUE_SHAPES}[which]
    mix = training.ISSUE_VARLEN_MIX if which == "issue" else training.VARLEN_MIX
    if dev.DRY:
        shapes, mix = training.DRY_SHAPES, training.DRY_VARLEN
    masks = {"causal": [True], "full": [False], "both": [True, False]}[args.masks]
    flex_mode = args.flex or ("first" if args.quick else "all")
    work = [("dense", s, c) for s in shapes for c in masks]
    if not args.no_varlen:
        work += [("varlen", mix, c) for c in masks]
    w = runner.open_writer(suite, args, {"quick": args.quick, "shapes": shapes, "varlen_mix": mix,
                                         "flex": flex_mode, "flush": not args.no_flush,
                                         "causal": masks[0] if len(masks) == 1 else "both"})
    budget = harness.Budget(args.budget_s)
    for i, (kind, spec, causal) in enumerate(harness.progress(work, total=len(work), desc=suite)):
        if budget.exhausted():
            w.note({"skipped": str(spec), "why": "budget"})
            continue
        p = None
        try:
            if kind == "dense":
                p = training.make_problem(spec, causal=causal)
            elif dev.DRY:
                p = training.make_problem(None, causal=causal, varlen=spec, heads=training.DRY_VARLEN_HEADS)
            else:
                p = training.make_problem(None, causal=causal, varlen=spec, heads=training.VARLEN_HEADS)
            want_flex = flex_mode == "all" or (flex_mode == "first" and i == 0)
            rec = run_train_case(p, mode, args, want_flex, twin=(i % 3 == 0))
            w.case(rec)
            s = rec["summary"]
            line = ", ".join(f"{k}={v['arm']} {v['tflops']:.0f}" for k, v in s.items()
                             if isinstance(v, dict) and "tflops" in v and "arm" in v)
            print(f"  {rec['case']}: {line}; ours {s.get('ours', {}).get('tflops') if s.get('ours') else s.get('ours_status')}",
                  flush=True)
        except Exception as e:
            w.note({"case_failed": str(spec), "error": harness.unavailable_reason(e)})
        finally:
            p = None
            dev.empty_cache()
    print(f"{suite}: {w.count} cases -> {', '.join(w.paths)}")

"""Invariance suite: what stays bit-identical, for every arm.

  repeat  : the same call twice (forward output; backward dQ, dK, dV)
  batch   : request 0 computed inside a batch of 4 vs alone (batch of 1)
  packing : each sequence of a varlen pack vs the same sequence alone (dense, B=1)
  split   : decode, request 0 inside a batch of 8 vs alone (the split/plan a
            decode kernel picks may depend on the batch), and for arms with a split
            knob (FA3 num_splits) split 1 vs automatic
Arms: every training arm (SDPA backends and their deterministic modes, Flex when
asked, FA3/FA4 where importable, ours) and every decode arm. "n/a: ..." where an
arm has no such mode (e.g. no varlen entry point).

  python -m benchmarks.invariance [--quick] [--out DIR] [--flex]
"""
from __future__ import annotations

import argparse
from typing import Any, Dict

from . import device as dev
from . import harness, metrics, runner, training
from .arms import flash, fold, sdpa
from .arms.problems import DecodeProblem, TrainProblem
from .decode import synthetic_problem


def _run(c):
    r = c.fn()
    dev.sync()
    if isinstance(r, (tuple, list)):
        return tuple(x.detach().clone() for x in r)
    return r.detach().clone()


def _by_name(p, mode, want_flex):
    with harness.on_side_stream():
        cands, missing = runner.collect(training.builders(p, mode, want_flex))
    return {c.name: c for c in cands}, missing


def _sub(p: TrainProblem, b0: int, b1: int) -> TrainProblem:
    return TrainProblem(p.q[b0:b1].contiguous(), p.k[b0:b1].contiguous(), p.v[b0:b1].contiguous(),
                        p.dout[b0:b1].contiguous(), causal=p.causal)


def _slice(res, sl):
    if isinstance(res, tuple):
        return tuple(x[sl] for x in res)
    return res[sl]


def train_invariance(mode: str, shape, seqlens, want_flex: bool) -> Dict[str, Any]:
    out: Dict[str, Dict[str, Any]] = {}
    p4 = training.make_problem(shape)
    p1 = _sub(p4, 0, 1)
    c4, miss4 = _by_name(p4, mode, want_flex)
    c1, _ = _by_name(p1, mode, want_flex)
    for name, c in c4.items():
        rec = {"arm": c.arm, "config": c.config}
        try:
            a = _run(c)
            b = _run(c)
            rec["repeat"] = metrics.bitwise_equal(a, b)
            if name in c1:
                one = _run(c1[name])
                rec["batch"] = metrics.bitwise_equal(_slice(a, slice(0, 1)), one)
            else:
                rec["batch"] = "n/a: no batch-1 candidate"
            rec["status"] = "ok"
        except Exception as e:
            rec["status"] = harness.unavailable_reason(e)
        out[name] = rec
    del c4, c1
    # packing: varlen vs each sequence alone
    H, Hkv, D = shape[2], shape[3], shape[4]
    pv = training.make_problem(None, varlen=seqlens, heads=(H, Hkv, D), seed=1)
    cv, missv = _by_name(pv, mode, want_flex)
    singles = []
    start = 0
    for s in seqlens:
        sl = slice(start, start + s)
        singles.append((sl, TrainProblem(pv.q[sl][None].contiguous(), pv.k[sl][None].contiguous(),
                                         pv.v[sl][None].contiguous(), pv.dout[sl][None].contiguous(),
                                         causal=pv.causal)))
        start += s
    single_c = [_by_name(sp, mode, want_flex)[0] for _, sp in singles]
    for name, rec in out.items():
        vname = None
        for n in cv:
            if cv[n].arm == rec["arm"] and {k: v for k, v in cv[n].config.items() if k != "layout"} == rec["config"]:
                vname = n
        if vname is None:
            rec["packing"] = "n/a: no varlen entry point"
            continue
        try:
            packed = _run(cv[vname])
            same = True
            for (sl, _), cs in zip(singles, single_c):
                alone = _run(cs[name])
                same = same and metrics.bitwise_equal(_slice(packed, sl), _slice(alone, 0))
            rec["packing"] = same
        except Exception as e:
            rec["packing"] = harness.unavailable_reason(e)
    return {"mode": mode, "shape": list(shape), "varlen": seqlens, "arms": out,
            "unavailable": {**miss4, **missv}}


def decode_invariance(shape) -> Dict[str, Any]:
    B, L, H, Hkv, D = shape
    pb = synthetic_problem(B, L, H, Hkv, D, seed=3)
    p1 = DecodeProblem(q=pb.q[:1].contiguous(), k=pb.k[:1].contiguous(), v=pb.v[:1].contiguous())
    out: Dict[str, Any] = {}
    missing: Dict[str, str] = {}
    builders = [("sdpa", sdpa.decode_candidates), ("fa3", flash.decode_candidates),
                ("fold", lambda p: fold.decode_candidates(p, depths=(None, fold.DEFAULT_DEPTH), v8s=(False, True)))]
    for arm, build in builders:
        try:
            cb = {c.name: c for c in build(pb)}
            c1 = {c.name: c for c in build(p1)}
        except Exception as e:
            missing[arm] = harness.unavailable_reason(e)
            continue
        for name, c in cb.items():
            rec = {"arm": c.arm, "config": c.config}
            try:
                a = _run(c)
                rec["repeat"] = metrics.bitwise_equal(a, _run(c))
                rec["split"] = metrics.bitwise_equal(a[:1], _run(c1[name])) if name in c1 else "n/a"
                rec["status"] = "ok"
            except Exception as e:
                rec["status"] = harness.unavailable_reason(e)
            out[name] = rec
        if arm == "fa3":
            try:
                ns = {c.config["num_splits"]: _run(c) for c in cb.values() if c.config.get("pack_gqa") is None}
                out["fa3[num_splits 1 vs auto]"] = {"arm": "fa3", "split_knob": metrics.bitwise_equal(ns[0], ns[1])}
            except Exception as e:
                out["fa3[num_splits 1 vs auto]"] = {"arm": "fa3", "status": harness.unavailable_reason(e)}
    return {"mode": "decode", "shape": list(shape), "arms": out, "unavailable": missing}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    runner.common_args(ap)
    ap.add_argument("--flex", action="store_true")
    args = ap.parse_args(argv)
    runner.require_cuda()
    shape = (4, 1024, 8, 2, 128)
    seqlens = [700, 129, 1024, 195]
    dshape = (8, 8192, 32, 8, 128)
    if dev.DRY:
        shape, seqlens, dshape = (4, 64, 4, 2, 32), [40, 17, 64], (4, 256, 8, 2, 32)
    w = runner.open_writer("invariance", args, {"shape": shape, "varlen": seqlens, "flex": args.flex})
    budget = harness.Budget(args.budget_s)
    jobs = [("fwd", lambda: train_invariance("fwd", shape, seqlens, args.flex)),
            ("bwd", lambda: train_invariance("bwd", shape, seqlens, args.flex)),
            ("decode", lambda: decode_invariance(dshape))]
    for name, job in harness.progress(jobs, total=len(jobs), desc="invariance"):
        if budget.exhausted():
            w.note({"skipped": name, "why": "budget"})
            continue
        try:
            rec = job()
            rec["case"] = name
            w.case(rec)
            for n, r in rec["arms"].items():
                print(f"  {name} {n}: " + ", ".join(f"{k}={r[k]}" for k in ("repeat", "batch", "packing", "split",
                                                                             "split_knob", "status") if k in r))
        except Exception as e:
            w.note({"case_failed": name, "error": harness.unavailable_reason(e)})
        dev.empty_cache()
    print(f"invariance: {w.count} cases -> {', '.join(w.paths)}")


if __name__ == "__main__":
    main()

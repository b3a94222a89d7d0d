"""Summarize the latest results: benchmarks/RESULTS.md, figures, results/summary.json.

Reads <results>/{decode,generate,backward,forward,invariance}.jsonl (the latest
run of each suite) and writes
  RESULTS.md                      tables per suite, provenance, unavailable arms
  figures/decode_latency_error.png  latency vs FP32-relative error per decode case:
                                  one curve per (v8) configuration sweeping depth,
                                  baselines as points
  figures/backward_throughput.png   TFLOP/s per arm per shape; under each panel our
                                  ratio to the fastest deterministic and the
                                  fastest nondeterministic arm
  figures/forward_throughput.png
  figures/generate_step_error.png   per-step error of multi-step decode on the captures
  results/summary.json            the headline numbers (schema in README.md)
into benchmarks/ and, with --out DIR, into DIR/benchmarks/ as well.

  python -m benchmarks.summarize [--results DIR] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any, Dict, List, Optional

from . import results as R
from .provenance import REPO_ROOT

BENCH_DIR = os.path.join(REPO_ROOT, "benchmarks")
SUITES = ("decode", "generate", "backward", "forward", "invariance")


def _f(x, fmt="{:.3g}", none="—"):
    x = R.from_json_float(x)
    if x is None:
        return none
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, (int, float)):
        if isinstance(x, float) and not math.isfinite(x):
            return str(x)
        return fmt.format(x)
    return str(x)


def _tf(x):
    x = R.from_json_float(x)
    if isinstance(x, (int, float)) and math.isfinite(x) and abs(x) >= 100:
        return f"{x:.0f}"
    return _f(x)


def load(results_dir: str) -> Dict[str, Any]:
    out = {}
    for s in SUITES:
        d = R.load_suite(s, results_dir)
        if d is not None:
            out[s] = d
    return out


# ----------------------------------------------------------------------------- summary.json

def build_summary(data: Dict[str, Any]) -> Dict[str, Any]:
    summ: Dict[str, Any] = {"backward": [], "forward": [], "decode": [], "provenance": {}}
    for suite in ("decode", "backward", "forward", "generate", "invariance"):
        if suite in data and data[suite]["run"]:
            summ["provenance"][suite] = data[suite]["run"].get("provenance")
            summ["provenance"][suite + "_started"] = data[suite]["run"].get("started")
    for c in data.get("backward", {}).get("cases", []):
        s = c.get("summary", {})
        o = s.get("ours") or {}
        nd, de = s.get("fastest_nondeterministic"), s.get("fastest_deterministic")
        summ["backward"].append({
            "case": c["case"], "ours_tflops": o.get("tflops"),
            "fastest_nondeterministic": {"arm": nd["candidate"], "tflops": nd["tflops"]} if nd else None,
            "fastest_deterministic": {"arm": de["candidate"], "tflops": de["tflops"]} if de else None,
            "ratio_vs_nondeterministic": (s.get("ratio_vs_nondeterministic") or {}).get("median"),
            "ratio_vs_deterministic": (s.get("ratio_vs_deterministic") or {}).get("median"),
            "bit_identical": o.get("bit_identical"),
            "ours_status": None if o else s.get("ours_status")})
    for c in data.get("forward", {}).get("cases", []):
        s = c.get("summary", {})
        o = s.get("ours") or {}
        fb = s.get("fastest")
        summ["forward"].append({
            "case": c["case"], "ours_tflops": o.get("tflops"),
            "fastest": {"arm": fb["candidate"], "tflops": fb["tflops"]} if fb else None,
            "ratio": (s.get("ratio_vs_fastest") or {}).get("median"),
            "ours_status": None if o else s.get("ours_status")})
    for c in data.get("decode", {}).get("cases", []):
        s = c.get("summary", {})
        o = s.get("ours") or {}
        fb = s.get("fastest_baseline")
        rule = c.get("rule", {})
        summ["decode"].append({
            "case": c["case"], "batch": c["batch"], "context": c["context"],
            "depth": rule.get("default_depth"), "v8": rule.get("default_v8"),
            "ours_us": o.get("us"),
            "fastest_baseline": {"arm": fb["candidate"], "us": fb["us"]} if fb else None,
            "speedup": s.get("speedup"), "error": o.get("error"), "band": (c.get("band") or {}).get("band"),
            "pct_of_ceiling": o.get("pct_of_ceiling"), "ceiling_tbs": c.get("ceiling_tbs"),
            "baseline_pct_of_ceiling": (c["arms"].get(fb["candidate"], {}).get("pct_of_ceiling") if fb else None),
            "ours_status": None if o else s.get("ours_status")})
    return summ


# ----------------------------------------------------------------------------- RESULTS.md

def _prov_md(data) -> List[str]:
    lines = []
    for suite in SUITES:
        run = (data.get(suite) or {}).get("run")
        if not run:
            continue
        p = run.get("provenance", {})
        g, v, git = p.get("gpu", {}), p.get("versions", {}), p.get("git", {})
        lines.append(f"- **{suite}** ({run.get('started')}): {g.get('name')}, SM {g.get('clock_sm_mhz')}/"
                     f"{g.get('clock_max_sm_mhz')} MHz, mem {g.get('clock_mem_mhz')} MHz, driver {g.get('driver')}; "
                     f"torch {v.get('torch')}, CUDA {v.get('cuda')}, cuDNN {v.get('cudnn')}, Triton {v.get('triton')}; "
                     f"flashinfer {v.get('flashinfer')}; FA3 {v.get('flash_attn_interface')}; "
                     f"fold_attention {v.get('fold_attention')}; commit {git.get('commit')}"
                     f"{' (dirty)' if git.get('dirty') else ''}; `{p.get('command')}`")
    return lines


def _unavail(cases) -> Dict[str, str]:
    u: Dict[str, str] = {}
    for c in cases:
        for a, why in (c.get("unavailable") or {}).items():
            u.setdefault(a, why)
        for n, r in (c.get("arms") or {}).items():
            st = r.get("status")
            if st and st != "ok":
                u.setdefault(n, st)
    return u


def decode_md(d) -> List[str]:
    cases = d["cases"]
    L = ["## Decode", "", "One query token per request, graph-replayed, L2 flushed. Ours at the rule fixed before "
         "the run (default depth 16, v8 off). Error: relative Frobenius vs FP32; band = largest bf16-baseline error.",
         ""]
    ceil = [n.get("ceiling") for n in d.get("notes", []) if n.get("ceiling")]
    if ceil:
        c0 = ceil[0]
        L.append(f"Read ceiling (same run): **{_f(c0.get('tbs'))} TB/s** ({c0.get('method')}).")
        L.append("")
    L += ["| case | fastest baseline | us | TB/s | % ceiling | error | band | bf16 floor | ours us | speedup | ours error | ours % ceiling |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        s = c.get("summary", {})
        fb = s.get("fastest_baseline") or {}
        br = c["arms"].get(fb.get("candidate"), {}) if fb else {}
        o = s.get("ours") or {}
        L.append(f"| {c['case']} | {fb.get('candidate', '—')} | {_f(fb.get('us'), '{:.1f}')} | {_f(br.get('tbs'), '{:.2f}')} | "
                 f"{_f(br.get('pct_of_ceiling'), '{:.0f}')} | {_f((br.get('error') or {}).get('err'))} | "
                 f"{_f((c.get('band') or {}).get('band'))} | {_f((c.get('bf16_floor') or {}).get('err'))} | "
                 f"{_f(o.get('us'), '{:.1f}')} | {_f(s.get('speedup'), '{:.2f}')} | {_f(o.get('error'))} | "
                 f"{_f(o.get('pct_of_ceiling'), '{:.0f}')} |")
    L += ["", "Every arm (winner configuration of each baseline; all our configurations):", "",
          "| case | arm | config | us (p10-p90) | error | worst row | bytes/key | TB/s | graph |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        keep = set(c.get("winners", {}).values())
        for n, r in c["arms"].items():
            if r.get("status") != "ok" or not (n in keep or r.get("arm") == "fold"):
                continue
            e = r.get("error") or {}
            L.append(f"| {c['case']} | {r['arm']} | {json.dumps(r.get('config'))} | {_f(r.get('median_us'), '{:.1f}')} "
                     f"({_f(r.get('p10_us'), '{:.1f}')}-{_f(r.get('p90_us'), '{:.1f}')}) | {_f(e.get('err'))} | "
                     f"{_f(e.get('worst_row'))} | {_f(r.get('bytes_per_key'), '{:.0f}')} | {_f(r.get('tbs'), '{:.2f}')} | "
                     f"{_f(r.get('graph'))} |")
    nf = [(c["case"], r["noise_floor"]) for c in cases for r in c["arms"].values() if r.get("noise_floor")]
    if nf:
        L += ["", "Noise floor (same arm captured twice, median ratio of rounds, p10-p90): " +
              "; ".join(f"{k}: {_f(v['median'], '{:.3f}')} ({_f(v['p10'], '{:.3f}')}-{_f(v['p90'], '{:.3f}')})"
                        for k, v in nf)]
    return L + [""]


def train_md(d, mode) -> List[str]:
    cases = d["cases"]
    title = "Backward" if mode == "bwd" else "Forward"
    L = [f"## {title}", "", "Causal and full (non-causal) cases, TFLOP/s (" +
         ("backward = 2.5x forward FLOPs" if mode == "bwd" else "4·B·H·S²·D, halved when causal") +
         "), each arm's winning configuration.", ""]
    if mode == "bwd":
        L += ["| case | arm | config | TFLOP/s | deterministic mode | repeat bit-identical | err dQ | err dK | err dV |",
              "|---|---|---|---|---|---|---|---|---|"]
    else:
        L += ["| case | arm | config | TFLOP/s | error | worst row |", "|---|---|---|---|---|---|"]
    for c in cases:
        for a, n in sorted(c.get("winners", {}).items(), key=lambda kv: -(c["arms"][kv[1]].get("tflops") or 0)):
            r = c["arms"][n]
            e = r.get("error") or {}
            if mode == "bwd":
                L.append(f"| {c['case']} | {a} | {json.dumps(r.get('config'))} | {_tf(r.get('tflops'))} | "
                         f"{_f(r.get('deterministic_mode'))} | {_f(r.get('repeat_identical'))} | "
                         f"{_f((e.get('dq') or {}).get('err'))} | {_f((e.get('dk') or {}).get('err'))} | "
                         f"{_f((e.get('dv') or {}).get('err'))} |")
            else:
                L.append(f"| {c['case']} | {a} | {json.dumps(r.get('config'))} | {_tf(r.get('tflops'))} | "
                         f"{_f(e.get('err'))} | {_f(e.get('worst_row'))} |")
        s = c.get("summary", {})
        if mode == "bwd":
            o = s.get("ours") or {}
            L.append(f"| {c['case']} | **ours / fastest** | | "
                     f"nondeterministic: {_f((s.get('ratio_vs_nondeterministic') or {}).get('median'), '{:.2f}')}x, "
                     f"deterministic: {_f((s.get('ratio_vs_deterministic') or {}).get('median'), '{:.2f}')}x | "
                     f"{'yes' if o else ''} | {_f(o.get('bit_identical')) if o else (s.get('ours_status') or '')} "
                     f"| | | |")
        else:
            s = c.get("summary", {})
            L.append(f"| {c['case']} | **ours / fastest** | | "
                     f"{_f((s.get('ratio_vs_fastest') or {}).get('median'), '{:.2f}')}x | "
                     f"{'' if s.get('ours') else (s.get('ours_status') or '')} | |")
    return L + [""]


def generate_md(d) -> List[str]:
    L = ["## Generate (multi-step decode on real-model captures)", "",
         "| case | arm | config | median step error | max step error | worst row | us/step | band | bf16 floor |",
         "|---|---|---|---|---|---|---|---|---|"]
    for c in d["cases"]:
        for n, r in c["arms"].items():
            if r.get("status") != "ok":
                continue
            L.append(f"| {c['case']} | {r['arm']} | {json.dumps(r.get('config'))} | {_f(r.get('err_median'))} | "
                     f"{_f(r.get('err_max'))} | {_f(r.get('worst_row_max'))} | {_f(r.get('us_per_step'), '{:.1f}')} | "
                     f"{_f((c.get('band') or {}).get('band'))} | {_f(c.get('bf16_floor_median'))} |")
    return L + [""]


def invariance_md(d) -> List[str]:
    L = ["## Invariance (bit-identical?)", "", "| case | arm | config | repeat | batch | packing | split |",
         "|---|---|---|---|---|---|---|"]
    for c in d["cases"]:
        for n, r in c["arms"].items():
            L.append(f"| {c['case']} | {r.get('arm')} | {json.dumps(r.get('config'))} | {_f(r.get('repeat'))} | "
                     f"{_f(r.get('batch'))} | {_f(r.get('packing'))} | {_f(r.get('split', r.get('split_knob')))} |"
                     + (f" {r['status']}" if r.get("status") not in (None, "ok") else ""))
    return L + [""]


def results_md(data) -> str:
    L = ["# Benchmark results", "", "Generated by `python -m benchmarks.summarize` from the latest run of each suite "
         "(protocol: benchmarks/README.md). Figures: `benchmarks/figures/`.", "", "## Provenance", ""]
    L += _prov_md(data) + [""]
    if "decode" in data:
        L += decode_md(data["decode"])
    if "generate" in data:
        L += generate_md(data["generate"])
    if "backward" in data:
        L += train_md(data["backward"], "bwd")
    if "forward" in data:
        L += train_md(data["forward"], "fwd")
    if "invariance" in data:
        L += invariance_md(data["invariance"])
    L += ["## Unavailable arms", ""]
    for suite, d in data.items():
        by_reason: Dict[str, List[str]] = {}
        for a, why in sorted(_unavail(d["cases"]).items()):
            by_reason.setdefault(why, []).append(a)
        for why, arms in by_reason.items():
            L.append(f"- {suite}: " + ", ".join(f"`{a}`" for a in arms) + f": {why}")
        for n in d.get("notes", []):
            if "case_failed" in n or "skipped" in n or "captures" in n:
                L.append(f"- {suite}: {json.dumps({k: v for k, v in n.items() if k not in ('type', 'suite')})}")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------- figures

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def fig_decode(d, path: str) -> Optional[str]:
    plt = _plt()
    cases = [c for c in d["cases"] if c.get("arms")]
    if not cases:
        return None
    n = len(cases)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    markers = {"sdpa.cudnn": "o", "sdpa.flash": "s", "sdpa.efficient": "^", "flex": "D", "flashinfer": "P", "fa3": "X"}
    for i, c in enumerate(cases):
        ax = axes[i // cols][i % cols]
        winners = set(c.get("winners", {}).values())
        curves: Dict[str, List] = {}
        any_ours = False
        for name, r in c["arms"].items():
            if r.get("status") != "ok" or "median_us" not in r:
                continue
            err = R.from_json_float((r.get("error") or {}).get("err"))
            if err is None or not math.isfinite(err) or err <= 0:
                continue
            if r["arm"] == "fold":
                key = "ours v8" if r["config"].get("v8") else "ours bf16 V"
                d_ = r["config"].get("depth")
                curves.setdefault(key, []).append((d_ if d_ is not None else 1e9, err, r["median_us"], d_))
                any_ours = True
            elif name in winners:
                ax.scatter([err], [r["median_us"]], marker=markers.get(r["arm"], "o"), label=r["arm"], zorder=3)
        for key, pts in curves.items():
            pts.sort()
            ax.plot([p[1] for p in pts], [p[2] for p in pts], "-o", ms=3, label=key)
            for p in pts:
                ax.annotate("dense" if p[3] is None else str(p[3]), (p[1], p[2]), fontsize=6,
                            textcoords="offset points", xytext=(2, 2))
        band = R.from_json_float((c.get("band") or {}).get("band"))
        if band:
            ax.axvline(band, color="gray", ls=":", lw=1)
        floor = R.from_json_float((c.get("bf16_floor") or {}).get("err"))
        if floor:
            ax.axvline(floor, color="k", ls="--", lw=0.8)
        ax.set_xscale("log")
        xs = [x for x in ([p[1] for pts in curves.values() for p in pts] +
                          [R.from_json_float((c["arms"][n].get("error") or {}).get("err")) for n in winners
                           if c["arms"].get(n, {}).get("status") == "ok"] + [band, floor])
              if x is not None and isinstance(x, float) and math.isfinite(x) and x > 0]
        if xs:
            ax.set_xlim(min(xs) / 2.5, max(xs) * 2.5)
        from matplotlib.ticker import LogLocator, NullFormatter
        ax.xaxis.set_major_locator(LogLocator(base=10.0))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(c["case"].replace("synthetic:", "").replace("capture:", "cap:"), fontsize=7)
        ax.set_xlabel("FP32-relative error", fontsize=7)
        ax.set_ylabel("latency (us)", fontsize=7)
        ax.tick_params(labelsize=6)
        if not any_ours:
            st = (c.get("summary") or {}).get("ours_status") or (c.get("unavailable") or {}).get("fold", "")
            ax.text(0.02, 0.02, ("ours: " + str(st))[:60], transform=ax.transAxes, fontsize=5, color="red")
        if i == 0:
            ax.legend(fontsize=6)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("Decode latency vs FP32-relative error (dotted: band, dashed: bf16 floor; labels: depth)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def fig_train(d, path: str, mode: str) -> Optional[str]:
    plt = _plt()
    cases = [c for c in d["cases"] if c.get("winners")]
    if not cases:
        return None
    n = len(cases)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.8 * rows), squeeze=False)
    for i, c in enumerate(cases):
        ax = axes[i // cols][i % cols]
        items = sorted(c["winners"].items(), key=lambda kv: -(c["arms"][kv[1]].get("tflops") or 0))
        names = [a for a, _ in items]
        vals = [c["arms"][nm].get("tflops") or 0 for _, nm in items]
        colors = []
        for a, nm in items:
            r = c["arms"][nm]
            colors.append("tab:red" if a == "fold" else ("tab:green" if r.get("deterministic") else "tab:blue"))
        ax.bar(range(len(vals)), vals, color=colors)
        ax.set_xticks(range(len(vals)))
        ax.set_xticklabels(names, rotation=40, ha="right", fontsize=6)
        ax.set_ylabel("TFLOP/s", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.set_title(c["case"], fontsize=8)
        s = c.get("summary", {})
        if mode == "bwd":
            if s.get("ours"):
                txt = (f"ours / fastest deterministic: {_f((s.get('ratio_vs_deterministic') or {}).get('median'), '{:.2f}')}x   "
                       f"ours / fastest nondeterministic: {_f((s.get('ratio_vs_nondeterministic') or {}).get('median'), '{:.2f}')}x")
            else:
                txt = "ours: " + str(s.get("ours_status", "not run"))[:70]
        else:
            txt = (f"ours / fastest: {_f((s.get('ratio_vs_fastest') or {}).get('median'), '{:.2f}')}x" if s.get("ours")
                   else "ours: " + str(s.get("ours_status", "not run"))[:70])
        ax.text(0.5, -0.45, txt, transform=ax.transAxes, ha="center", fontsize=6)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    what = "backward" if mode == "bwd" else "forward"
    fig.suptitle(f"Causal {what} throughput (green: deterministic and repeat-identical, blue: not, red: ours)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def fig_generate(d, path: str) -> Optional[str]:
    plt = _plt()
    cases = [c for c in d["cases"] if c.get("arms")]
    if not cases:
        return None
    n = len(cases)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 3.4 * rows), squeeze=False)
    for i, c in enumerate(cases):
        ax = axes[i // cols][i % cols]
        for name, r in c["arms"].items():
            errs = [R.from_json_float(e) for e in (r.get("step_err") or [])]
            if r.get("status") != "ok" or not errs:
                continue
            ls = "-" if r["arm"] == "fold" else ":"
            ax.plot(range(len(errs)), errs, ls, lw=1, label=f"{name} ({_f(r.get('us_per_step'), '{:.0f}')} us/step)")
        ax.set_yscale("log")
        ax.set_title(c["case"], fontsize=7)
        ax.set_xlabel("decode step", fontsize=7)
        ax.set_ylabel("FP32-relative error", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5)
    for j in range(n, rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("Multi-step decode on real-model captures: per-step error", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def write_all(data, base_dir: str) -> List[str]:
    written = []
    os.makedirs(os.path.join(base_dir, "figures"), exist_ok=True)
    os.makedirs(os.path.join(base_dir, "results"), exist_ok=True)
    p = os.path.join(base_dir, "results", "summary.json")
    with open(p, "w") as f:
        json.dump(R._jsonable(build_summary(data)), f, indent=1)
    written.append(p)
    p = os.path.join(base_dir, "RESULTS.md")
    with open(p, "w") as f:
        f.write(results_md(data))
    written.append(p)
    try:
        if "decode" in data:
            r = fig_decode(data["decode"], os.path.join(base_dir, "figures", "decode_latency_error.png"))
            written += [r] if r else []
        if "generate" in data:
            r = fig_generate(data["generate"], os.path.join(base_dir, "figures", "generate_step_error.png"))
            written += [r] if r else []
        if "backward" in data:
            r = fig_train(data["backward"], os.path.join(base_dir, "figures", "backward_throughput.png"), "bwd")
            written += [r] if r else []
        if "forward" in data:
            r = fig_train(data["forward"], os.path.join(base_dir, "figures", "forward_throughput.png"), "fwd")
            written += [r] if r else []
    except ImportError as e:
        print(f"figures skipped: {e}")
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=None, help="results directory (default: OUT/benchmarks/results with "
                                                    "--out, else benchmarks/results)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-repo", action="store_true", help="write only under --out")
    args = ap.parse_args(argv)
    rdir = args.results or (os.path.join(args.out, "benchmarks", "results") if args.out else R.DEFAULT_DIR)
    data = load(rdir)
    if not data:
        raise SystemExit(f"no results under {os.path.relpath(rdir)}")
    from . import device as dev
    dry = dev.DRY or any((d.get("run") or {}).get("provenance", {}).get("config", {}).get("dry_run_on_cpu")
                         for d in data.values())
    if dry and not args.no_repo:
        print("dry-run results: not writing into benchmarks/ (only under --out)")
    targets = [] if (args.no_repo or dry) else [BENCH_DIR]
    if args.out:
        targets.append(os.path.join(args.out, "benchmarks"))
    for t in targets:
        for p in write_all(data, t):
            print("wrote", os.path.relpath(p))


if __name__ == "__main__":
    main()

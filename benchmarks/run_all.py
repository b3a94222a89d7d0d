"""Run every suite, then summarize: one command for a GPU round.

  python -m benchmarks.run_all --quick --out "$OUT" [--budget-s 420]

Each suite runs in its own process (a sticky CUDA error in one cannot take the
others down), with a share of the budget (it starts no new case past its share,
and is stopped at share + grace). Results go to OUT/benchmarks/results/ and
benchmarks/results/; summarize then writes OUT/benchmarks/RESULTS.md, figures and
results/summary.json (and the same under benchmarks/), so copying OUT/benchmarks/
over benchmarks/ brings a GPU round home.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

# (suite, share of the budget, extra quick-mode args)
SUITES = [("decode", 0.30, []), ("backward", 0.27, []), ("forward", 0.15, []), ("generate", 0.10, []),
          ("invariance", 0.10, [])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget-s", type=float, default=None, help="total (default 420 quick, 3000 full)")
    ap.add_argument("--only", default=None, help="comma-separated suites")
    ap.add_argument("--skip", default="", help="comma-separated suites to skip")
    ap.add_argument("--grace-s", type=float, default=90.0, help="extra time before a suite is stopped")
    ap.add_argument("--no-summarize", action="store_true")
    args, extra = ap.parse_known_args(argv)
    total = args.budget_s or (420.0 if args.quick else 3000.0)
    only = set(args.only.split(",")) if args.only else None
    skip = set(x for x in args.skip.split(",") if x)
    t_start = time.time()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    env.setdefault("TQDM_MININTERVAL", "5")
    status = {}
    suites = [s for s in SUITES if (only is None or s[0] in only) and s[0] not in skip]
    share_sum = sum(s[1] for s in suites) or 1.0
    for name, share, qargs in suites:
        left = total - (time.time() - t_start)
        budget = max(20.0, total * share / share_sum)
        if left < 15:
            status[name] = "skipped: total budget spent"
            print(f"== {name}: skipped (budget)", flush=True)
            continue
        budget = min(budget, left)
        cmd = [sys.executable, "-m", f"benchmarks.{name}", "--budget-s", f"{budget:.0f}"]
        if args.quick:
            cmd.append("--quick")
            cmd += qargs
        if args.out:
            cmd += ["--out", args.out]
        cmd += extra
        print(f"== {name} (budget {budget:.0f}s)", flush=True)
        t0 = time.time()
        try:
            # stopped at its share + grace, and never later than the total budget + 60 s
            hard = min(budget + args.grace_s, total - (time.time() - t_start) + 60.0)
            r = subprocess.run(cmd, cwd=root, env=env, timeout=max(hard, 20.0))
            status[name] = f"rc={r.returncode} in {time.time() - t0:.0f}s"
        except subprocess.TimeoutExpired:
            status[name] = f"stopped after {time.time() - t0:.0f}s (budget {budget:.0f}s + grace)"
        print(f"== {name}: {status[name]}", flush=True)
    if not args.no_summarize:
        cmd = [sys.executable, "-m", "benchmarks.summarize"]
        if args.out:
            cmd += ["--out", args.out]
        try:
            r = subprocess.run(cmd, cwd=root, env=env, timeout=90)
            status["summarize"] = f"rc={r.returncode}"
        except subprocess.TimeoutExpired:
            status["summarize"] = "stopped"
    print("run_all:", status, f"total {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()

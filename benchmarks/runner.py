"""What every suite does with its arms: collect candidates (recording the arms that
cannot run), check each one's output against the case's reference (and, where
asked, that a repeat is bit-identical), then time the survivors together."""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import device as dev
from . import metrics, provenance
from .harness import Candidate, unavailable_reason
from .results import DEFAULT_DIR, ResultWriter


def collect(builders: Sequence[Tuple[str, Callable[[], List[Candidate]]]]):
    """Run each (arm name, builder); returns (candidates, {arm: "unavailable: ..."})."""
    cands: List[Candidate] = []
    missing: Dict[str, str] = {}
    for name, build in builders:
        try:
            cands.extend(build())
        except Exception as e:
            missing[name] = unavailable_reason(e)
            try:
                dev.sync()
            except Exception:
                pass
    return cands, missing


def _clone(x):
    if isinstance(x, (tuple, list)):
        return tuple(_clone(t) for t in x)
    return x.detach().clone() if torch.is_tensor(x) else x


def check(cands: List[Candidate], ref, names: Optional[List[str]] = None, repeats: int = 0,
          postprocess: Optional[Callable[[Any], Any]] = None):
    """Evaluate each candidate once (errors against ref) and `repeats` more times
    (bitwise identity). Returns (ok candidates, {name: record})."""
    ok, recs = [], {}
    for c in cands:
        rec: Dict[str, Any] = {"arm": c.arm, "config": c.config, "deterministic_mode": c.deterministic}
        try:
            res = c.fn()
            dev.sync()
            if postprocess is not None:
                res = postprocess(res)
            rec["error"] = _errors(res, ref, names)
            if repeats:
                first = _clone(res)
                same = True
                for _ in range(repeats):
                    again = c.fn()
                    if postprocess is not None:
                        again = postprocess(again)
                    same = same and metrics.bitwise_equal(first, again)
                    del again
                rec["repeat_identical"] = same
            del res
            rec["status"] = "ok"
            ok.append(c)
        except Exception as e:
            rec["status"] = unavailable_reason(e)
            try:
                dev.sync()
            except Exception:
                pass
        recs[c.name] = rec
    return ok, recs


def _errors(res, ref, names):
    if isinstance(ref, (tuple, list)):
        names = names or [f"out{i}" for i in range(len(ref))]
        res = tuple(res)
        return {n: metrics.error_report(r, f) for n, r, f in zip(names, res, ref)}
    if isinstance(res, (tuple, list)):
        res = res[0]
    return metrics.error_report(res, ref)


def common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true", help="the short sweep (minutes on an H200)")
    ap.add_argument("--out", default=None, help="also write results under OUT/benchmarks/results")
    ap.add_argument("--results-dir", default=DEFAULT_DIR, help="results directory (default benchmarks/results)")
    ap.add_argument("--no-repo-results", action="store_true", help="write only under --out")
    ap.add_argument("--budget-s", type=float, default=None, help="wall-clock budget; later cases are skipped")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--no-flush", action="store_true", help="measure warm (no L2 eviction)")


def out_dirs(args) -> List[str]:
    dirs = []
    if dev.DRY and not args.no_repo_results:
        print("dry run: not writing to benchmarks/results (use --out)", flush=True)
    elif not args.no_repo_results:
        dirs.append(args.results_dir)
    if args.out:
        dirs.append(os.path.join(args.out, "benchmarks", "results"))
    return dirs


def open_writer(suite: str, args, config: Dict[str, Any]) -> ResultWriter:
    prov = provenance.collect(config=dict(config, dry_run_on_cpu=dev.DRY))
    return ResultWriter(suite, out_dirs(args), prov)


def require_cuda() -> None:
    if dev.DRY:
        print("DRY RUN on the CPU (FOLD_BENCH_DEVICE=cpu): plumbing only, no meaningful timings", flush=True)
        return
    if not torch.cuda.is_available():
        raise SystemExit("this suite needs a CUDA GPU (FOLD_BENCH_DEVICE=cpu for a dry run of the plumbing)")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def now() -> float:
    return time.time()

"""Timing harness: CUDA-graph replays, L2 eviction, rotated arm order, per-round ratios.

Protocol (MEASURING.md):
  * each candidate's work is captured in a CUDA graph (eager replay where capture
    fails; the result says which) and warmed up first;
  * before every sample a buffer of >= 4x L2 is written, so no arm starts warm
    (pass flush=False to measure warm on purpose);
  * every round visits every candidate, the order rotated by one each round and
    reversed every other round, so no arm always follows the flush or another arm;
  * an arm's time is the median over all its samples, with p10/p90 spread; a ratio
    is the median of per-round ratios (round medians), with its own spread;
  * a "twin" (the same candidate captured a second time) can be added to a sweep:
    the spread between identical arms is the noise floor.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import torch

from . import device as dev

L2_FLUSH_BYTES = 256 * 2**20  # >= 4x the H200's 60 MB L2


class Unavailable(Exception):
    """An arm that cannot run here; the message says why."""


def unavailable_reason(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, Unavailable):
        return f"unavailable: {msg}"[:300]
    return f"unavailable: {type(exc).__name__}: {msg}"[:300]


@dataclass
class Candidate:
    """One measurable configuration of one arm."""
    arm: str                       # family, e.g. "sdpa.cudnn"
    config: Dict[str, Any]         # e.g. {"gqa": "pack"}
    fn: Callable[[], Any]          # the work on static inputs
    deterministic: bool = False    # declared deterministic mode
    meta: Dict[str, Any] = field(default_factory=dict)
    graph: Optional[Any] = None
    graph_error: Optional[str] = None

    @property
    def name(self) -> str:
        if not self.config:
            return self.arm
        cfg = ",".join(f"{k}={v}" for k, v in self.config.items())
        return f"{self.arm}[{cfg}]"

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.fn()


class Timer:
    """A CUDA event, or wall-clock time in a CPU dry run."""

    def __init__(self):
        self.ev = torch.cuda.Event(enable_timing=True) if not dev.DRY else None
        self.t = 0.0

    def record(self) -> None:
        if self.ev is not None:
            self.ev.record()
        else:
            self.t = time.perf_counter()

    def elapsed_us(self, end: "Timer") -> float:
        if self.ev is not None:
            return self.ev.elapsed_time(end.ev) * 1e3
        return (end.t - self.t) * 1e6


class L2Flusher:
    def __init__(self, nbytes: int = L2_FLUSH_BYTES, device: str = None):
        device = device or dev.DEVICE
        if dev.DRY:
            nbytes = 4 * 2**20
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        self.i = 0

    def __call__(self) -> None:
        self.i += 1
        self.buf.fill_(self.i)


_FLUSHER: Optional[L2Flusher] = None


def flusher() -> L2Flusher:
    global _FLUSHER
    if _FLUSHER is None:
        _FLUSHER = L2Flusher()
    return _FLUSHER


_SIDE_STREAM = None


def side_stream():
    """The one stream arms are built and captured on. Autograd runs a backward op on
    the stream of its forward op, so a backward can be captured only when its
    forward ran on the capturing stream: suites build backward arms under
    `with torch.cuda.stream(side_stream())` and capture() captures on it."""
    global _SIDE_STREAM
    if _SIDE_STREAM is None:
        _SIDE_STREAM = torch.cuda.Stream()
    return _SIDE_STREAM


class on_side_stream:
    def __enter__(self):
        if dev.DRY:
            return None
        s = side_stream()
        s.wait_stream(torch.cuda.current_stream())
        self.ctx = torch.cuda.stream(s)
        self.ctx.__enter__()
        return s

    def __exit__(self, *exc):
        if dev.DRY:
            return False
        self.ctx.__exit__(*exc)
        torch.cuda.current_stream().wait_stream(side_stream())
        torch.cuda.synchronize()
        return False


def capture(c: Candidate, warmup: int = 2, use_graph: bool = True) -> None:
    """Warm the candidate up eagerly, then capture it in a CUDA graph if it can be."""
    if dev.DRY:
        for _ in range(warmup):
            c.fn()
        c.graph_error = "dry run (CPU)"
        return
    s = side_stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            c.fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if not use_graph:
        c.graph_error = "graphs disabled"
        return
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, stream=s):
            c.fn()
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        c.graph = g
    except Exception as e:  # fall back to eager timing, and say so
        c.graph = None
        c.graph_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        try:
            dev.sync()
        except Exception:
            pass


def _pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def measure(cands: List[Candidate], rounds: int = 10, samples: int = 3, flush: bool = True,
            ref: Optional[str] = None, twin: Optional[str] = None, use_graph: bool = True,
            max_seconds: Optional[float] = None) -> Dict[str, Dict[str, Any]]:
    """Time candidates under the protocol; returns {candidate name: stats}.

    ref: candidate name that per-round ratios are taken against (default: none;
    ratios against every other candidate can be derived with ratio()).
    twin: name of a candidate to capture a second time ("<name>#twin").
    """
    runnable: List[Candidate] = []
    out: Dict[str, Dict[str, Any]] = {}
    for c in cands:
        try:
            capture(c, use_graph=use_graph)
            runnable.append(c)
        except Exception as e:
            out[c.name] = {"status": unavailable_reason(e)}
            try:
                dev.sync()
            except Exception:
                pass
    twin_name = None
    if twin is not None:
        for c in list(runnable):
            if c.name == twin:
                t = Candidate(arm=c.arm + "#twin", config=dict(c.config), fn=c.fn,
                              deterministic=c.deterministic, meta=dict(c.meta))
                capture(t, use_graph=use_graph)
                runnable.append(t)
                twin_name = t.name
                break
    fl = flusher() if flush else None
    per_round: Dict[str, List[float]] = {c.name: [] for c in runnable}
    all_samples: Dict[str, List[float]] = {c.name: [] for c in runnable}
    t0 = time.time()
    n = len(runnable)
    for r in range(rounds):
        order = runnable[r % n:] + runnable[:r % n] if n else []
        if r % 2 == 1:
            order = order[::-1]
        events = []
        for c in order:
            for _ in range(samples):
                if fl is not None:
                    fl()
                a, b = Timer(), Timer()
                a.record()
                c.run()
                b.record()
                events.append((c.name, a, b))
        dev.sync()
        round_times: Dict[str, List[float]] = {}
        for name, a, b in events:
            round_times.setdefault(name, []).append(a.elapsed_us(b))
        for name, ts in round_times.items():
            per_round[name].append(statistics.median(ts))
            all_samples[name].extend(ts)
        if max_seconds is not None and time.time() - t0 > max_seconds and r >= 2:
            break
    for c in runnable:
        ts = all_samples[c.name]
        out[c.name] = {
            "status": "ok", "arm": c.arm, "config": c.config,
            "graph": c.graph is not None, "graph_error": c.graph_error,
            "median_us": statistics.median(ts), "p10_us": _pct(ts, 0.1), "p90_us": _pct(ts, 0.9),
            "min_us": min(ts), "rounds": len(per_round[c.name]), "samples": len(ts),
            "round_us": per_round[c.name], "flush": flush,
        }
    if ref is not None and ref in per_round:
        for name in per_round:
            out[name]["ratio_vs_ref"] = ratio(per_round[name], per_round[ref])
            out[name]["ref"] = ref
    if twin_name is not None:
        out[twin]["noise_floor"] = ratio(per_round[twin_name], per_round[twin])
    # release graphs (their memory pools) now
    for c in runnable:
        c.graph = None
    return out


def twin_choice(cands: List[Candidate]) -> Optional[str]:
    """The candidate captured twice for the noise floor: the first cuDNN SDPA one,
    else the first SDPA one."""
    for pref in ("sdpa.cudnn", "sdpa."):
        for c in cands:
            if c.arm == pref or (pref.endswith(".") and c.arm.startswith(pref)):
                return c.name
    return None


def ratio(num_rounds: List[float], den_rounds: List[float]) -> Dict[str, float]:
    """Median of per-round ratios num/den with its p10/p90 spread."""
    rs = [a / b for a, b in zip(num_rounds, den_rounds) if b > 0]
    if not rs:
        return {"median": float("nan"), "p10": float("nan"), "p90": float("nan"), "n": 0}
    return {"median": statistics.median(rs), "p10": _pct(rs, 0.1), "p90": _pct(rs, 0.9), "n": len(rs)}


def best_per_arm(stats: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Each arm's winning configuration (lowest median) among its candidates."""
    best: Dict[str, Dict[str, Any]] = {}
    for name, s in stats.items():
        if s.get("status") != "ok" or "#twin" in s.get("arm", ""):
            continue
        a = s["arm"]
        if a not in best or s["median_us"] < best[a]["median_us"]:
            best[a] = dict(s, candidate=name)
    return best


class Budget:
    """A wall-clock budget shared by the cases of a suite."""

    def __init__(self, seconds: Optional[float]):
        self.t0 = time.time()
        self.seconds = seconds

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        return self.seconds - (time.time() - self.t0)

    def exhausted(self) -> bool:
        return self.left() <= 0


def progress(iterable, total: Optional[int] = None, desc: str = ""):
    """tqdm when available (a progress bar on long sweeps), plain iteration otherwise."""
    try:
        from tqdm import tqdm
        import os
        return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True,
                    mininterval=float(os.environ.get("TQDM_MININTERVAL", "1.0")))
    except Exception:
        return iterable

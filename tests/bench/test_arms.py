import builtins
import subprocess
import sys
import os
import json

import torch

from benchmarks import harness, runner
from benchmarks.arms import fold, flashinfer, flash
from benchmarks.arms.problems import DecodeProblem


def _tiny_decode():
    return DecodeProblem(q=torch.randn(1, 2, 8, dtype=torch.bfloat16), k=torch.randn(1, 1, 16, 8, dtype=torch.bfloat16),
                         v=torch.randn(1, 1, 16, 8, dtype=torch.bfloat16))


def test_missing_library_reports_unavailable(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name.startswith(("flashinfer", "flash_attn_interface", "fold_attention")):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.delitem(sys.modules, "fold_attention", raising=False)
    p = _tiny_decode()
    cands, missing = runner.collect([("flashinfer", lambda: flashinfer.decode_candidates(p)),
                                     ("fa3", lambda: flash.decode_candidates(p)),
                                     ("fold", lambda: fold.decode_candidates(p))])
    assert cands == []
    for arm in ("flashinfer", "fa3", "fold"):
        assert missing[arm].startswith("unavailable: ")
    assert "flashinfer" in missing["flashinfer"]


def test_not_implemented_kernel_is_unavailable_not_a_crash():
    def not_built():
        raise NotImplementedError("decode is not implemented in this build yet")
    c = harness.Candidate(arm="fold", config={"depth": 16}, fn=not_built)
    ok = harness.Candidate(arm="base", config={}, fn=lambda: torch.ones(2, 3))
    good, recs = runner.check([c, ok], torch.ones(2, 3), repeats=1)
    assert [x.name for x in good] == ["base"]
    assert recs["fold[depth=16]"]["status"] == \
        "unavailable: NotImplementedError: decode is not implemented in this build yet"
    assert recs["base"]["status"] == "ok" and recs["base"]["repeat_identical"] is True
    assert recs["base"]["error"]["err"] == 0.0


def test_candidate_names_and_winners():
    a = harness.Candidate(arm="sdpa.cudnn", config={"gqa": "pack"}, fn=lambda: None)
    assert a.name == "sdpa.cudnn[gqa=pack]"
    stats = {"x[a=1]": {"status": "ok", "arm": "x", "median_us": 5.0},
             "x[a=2]": {"status": "ok", "arm": "x", "median_us": 4.0},
             "x#twin[a=2]": {"status": "ok", "arm": "x#twin", "median_us": 1.0},
             "y": {"status": "unavailable: no"}}
    best = harness.best_per_arm(stats)
    assert list(best) == ["x"] and best["x"]["candidate"] == "x[a=2]"
    r = harness.ratio([2.0, 4.0, 6.0], [1.0, 2.0, 2.0])
    assert r["median"] == 2.0 and r["n"] == 3


def test_fold_train_arm_reports_unavailable_on_cuda_only_errors(monkeypatch):
    class FakeFA:
        @staticmethod
        def fold_attn_func(q, k, v, causal=False):
            raise NotImplementedError("fold_attn_func: CUDA kernels are not in this build")
    monkeypatch.setattr(fold, "import_fold", lambda: FakeFA)
    from benchmarks.arms.problems import TrainProblem
    t = torch.randn(1, 8, 2, 4)
    p = TrainProblem(t, t, t, t)
    cands, missing = runner.collect([("fold", lambda: fold.train_candidates(p, "bwd"))])
    assert cands == [] and missing["fold"].startswith("unavailable: ")
    cands, _ = runner.collect([("fold", lambda: fold.train_candidates(p, "fwd"))])
    good, recs = runner.check(cands, torch.zeros(1, 8, 2, 4))
    assert good == [] and "NotImplementedError" in recs["fold"]["status"]


def test_dry_run_pipeline_end_to_end(tmp_path):
    """The decode suite and summarize on the CPU (FOLD_BENCH_DEVICE=cpu): every record
    written, summary.json in the agreed shape."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, FOLD_BENCH_DEVICE="cpu", FOLD_CAPTURE_DIR=str(tmp_path / "none"),
               PYTHONPATH=root)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "benchmarks.decode", "--quick", "--no-captures", "--rounds", "2",
                        "--samples", "1", "--out", str(out), "--no-repo-results"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "benchmarks.summarize", "--out", str(out), "--no-repo"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.load(open(out / "benchmarks" / "results" / "summary.json"))
    assert set(s) >= {"backward", "forward", "decode", "provenance"}
    assert len(s["decode"]) == 2
    d = s["decode"][0]
    for key in ("case", "batch", "context", "depth", "v8", "ours_us", "fastest_baseline", "speedup", "error",
                "band", "pct_of_ceiling"):
        assert key in d
    assert d["fastest_baseline"]["arm"].startswith("sdpa.math")
    assert (out / "benchmarks" / "RESULTS.md").exists()

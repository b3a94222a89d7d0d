"""scripts/time_serving_ops.py runs (a CPU smoke run of its small shapes)."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_time_serving_ops_quick_runs_every_arm():
    pytest.importorskip("fold_attention")
    spec = importlib.util.spec_from_file_location("tso", os.path.join(ROOT, "scripts", "time_serving_ops.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--quick", "--device", "cpu"])
    chunks = [r for r in rows if "chunk" in r]
    windowed = [r for r in rows if "window" in r]
    assert [r["n"] for r in windowed] == [8, 40] and all(r["tail"] > 0 and r["steps"] > 0 for r in windowed)
    assert [(r["L"], r["n"]) for r in chunks] == [(300, 8), (300, 40)]
    assert all(r["chunk"] > 0 and r["recompute"] > 0 and r["steps"] > 0 for r in chunks)
    assert [r["op"] for r in rows if "op" in r] == ["truncate", "truncate (heavy list rebuilt)"]

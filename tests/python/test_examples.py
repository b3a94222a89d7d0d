"""The Python examples run (on the CPU reference) and do what they say."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_continuous_batching_serves_every_request_from_a_small_pool():
    summary = _load("continuous_batching").main(["--requests", "16", "--seed", "3"])
    assert summary["finished"] == 16
    assert summary["peak_pages"] <= summary["num_pages"] < summary["pages_at_max_len"]
    assert summary["preemptions"] > 0  # the pool is small enough that the scheduler must act

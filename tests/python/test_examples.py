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


def test_speculative_decoding_keeps_the_bits_of_accepted_tokens_only():
    summary = _load("speculative_decoding").main(["--rounds", "8", "--seed", "2"])
    assert 0 < summary["accepted"] < summary["drafted"]  # some drafts kept, some cut
    assert summary["same_bits_as_plain"]


def test_prefix_sharing_matches_one_prefill_and_saves_pages():
    summary = _load("prefix_sharing").main(["--users", "4"])
    # Two roundings of bf16 (each part, then the join) against one prefill's one.
    assert summary["worst_relative_difference"] < 1e-2
    assert summary["pages_used"] < summary["pages_if_separate"] / 2

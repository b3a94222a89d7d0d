"""The decode and training suites' bookkeeping with a working "ours" arm: a fake
fold_attention (exact attention on the CPU, fixed live fraction) plugged into the
real run_case code, then summarize on the records it produced."""
import argparse
import json
import types

import torch

from benchmarks import decode, summarize, train_case, training
from benchmarks.arms import fold
from benchmarks.reference import decode_reference


class FakeCache:
    def __init__(self, batch, n_heads, n_kv_heads, head_dim, max_len, depth=16, v8=False, dtype=None, device=None):
        self.depth, self.v8 = depth, v8

    def prefill(self, q, k, v, cu):
        B = cu.numel() - 1
        L = int(cu[1] - cu[0])
        self.k = k.view(B, L, *k.shape[1:]).transpose(1, 2)
        self.v = v.view(B, L, *v.shape[1:]).transpose(1, 2)

    def stats(self):
        return {"live_frac": 0.25 if self.depth is not None else 1.0}


def _fake_module():
    m = types.SimpleNamespace()
    m.FoldKVCache = FakeCache

    def with_kvcache(q, cache, k=None, v=None):
        B, _, H, D = q.shape
        o = decode_reference(q.view(B, H, D), cache.k, cache.v).to(q.dtype)
        if cache.depth is not None and cache.depth < 12:
            o = o * 1.1               # a cut that costs accuracy (10%)
        return o.view(B, 1, H, D)
    m.fold_attn_with_kvcache = with_kvcache

    def fold_attn_func(q, k, v, causal=False):
        G = q.shape[2] // k.shape[2]
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.repeat_interleave(G, 2).transpose(1, 2), v.repeat_interleave(G, 2).transpose(1, 2),
            is_causal=causal)
        return o.transpose(1, 2)
    m.fold_attn_func = fold_attn_func
    return m


def _args(**kw):
    a = dict(quick=True, rounds=3, samples=1, no_flush=False)
    a.update(kw)
    return argparse.Namespace(**a)


def test_decode_case_with_ours(monkeypatch):
    monkeypatch.setattr(fold, "import_fold", _fake_module)
    p = decode.synthetic_problem(2, 128, 8, 2, 32)
    rec = decode.run_case(p, _args(), ceiling_tbs=1.0, depths=(None, 8, 16), want_flex=False, twin=True)
    s = rec["summary"]
    assert s["ours"]["candidate"] == "fold[depth=16,v8=False]"
    assert s["speedup"] > 0 and s["fastest_baseline"]["arm"] == "sdpa.math"
    o = rec["arms"]["fold[depth=16,v8=False]"]
    assert o["live_frac"] == 0.25 and o["bytes_per_key"] == 32 + 2 + 0.25 * 32 + 0.25 * 64
    assert o["pct_of_ceiling"] is not None
    assert rec["arms"]["fold[depth=None,v8=False]"]["bytes_per_key"] == 4 * 32 + 2
    # depth 8 is 10% off: far outside the bf16 band, flagged, never ranked
    assert rec["arms"]["fold[depth=8,v8=False]"]["unranked_error_outlier"] is True
    assert any("#twin" in n for n in rec["arms"])
    assert rec["band"]["band"] is not None
    json.dumps(rec)     # serialisable as written
    data = {"decode": {"run": {"provenance": {}}, "cases": [json.loads(json.dumps(rec))], "notes": []}}
    summ = summarize.build_summary(data)
    d = summ["decode"][0]
    assert d["depth"] == 16 and d["v8"] is False and d["ours_us"] > 0 and d["error"] < 0.01
    md = summarize.results_md(data)
    assert "fold" in md


def test_backward_case_with_ours(monkeypatch):
    monkeypatch.setattr(fold, "import_fold", _fake_module)
    p = training.make_problem((1, 64, 4, 2, 16))
    rec = train_case.run_train_case(p, "bwd", _args(), want_flex=False)
    s = rec["summary"]
    assert s["ours"]["bit_identical"] is True
    assert s["fastest_deterministic"]["arm"] == "sdpa.math.det"
    assert s["fastest_nondeterministic"]["arm"] == "sdpa.math"
    assert s["ratio_vs_nondeterministic"]["median"] > 0
    assert rec["flops"] == 2.5 * 4 * 1 * 4 * 64 * 64 * 16 / 2
    data = {"backward": {"run": {"provenance": {}}, "cases": [json.loads(json.dumps(rec))], "notes": []}}
    b = summarize.build_summary(data)["backward"][0]
    assert b["bit_identical"] is True and b["fastest_deterministic"]["arm"].startswith("sdpa.math.det[")

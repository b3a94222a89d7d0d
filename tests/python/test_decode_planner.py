"""The decode planner's one choice: where a depth's screen runs (src/decode/decode_plan.h
screen_pays). At D 128 with G > 8 and at D 64 with G > 4 (bf16 / fp16 values), and with v8
values at D 64 / 128 whatever the group, a step with a depth reads every key: the output, LSE and statistics of depth None, bit for bit. Elsewhere the
screen runs and cuts keys. FOLD_DECODE_SCREEN=1 (which conftest.py sets for the other tests)
keeps the screen everywhere. On the CPU reference always, on the GPU where one is ready.
"""

from __future__ import annotations

import pytest
import torch

import fold_attention as fa

from decode_helpers import filled_cache, synth
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "D,Hkv,G,v8,screened",
    [(128, 2, 4, False, True), (128, 1, 8, False, True), (128, 1, 12, False, False),
     (128, 1, 16, False, False), (64, 2, 3, False, True), (64, 2, 4, False, True),
     (64, 1, 6, False, False), (64, 1, 16, False, False), (64, 1, 16, True, False),
     (128, 2, 4, True, False), (128, 1, 12, True, False), (64, 2, 3, True, False)],
)
def test_depth_reads_every_key_where_the_screen_does_not_pay(device, D, Hkv, G, v8, screened, monkeypatch):
    q, k, v = synth(2, Hkv, G, D, 700, seed=31)
    runs = {}
    # Depth 4: shallow enough that the screen, where it runs, cuts keys of these 700-key caches.
    for name, depth, keep in (("depth", 4.0, None), ("dense", None, None), ("kept", 4.0, "1")):
        if keep is None:
            monkeypatch.delenv("FOLD_DECODE_SCREEN", raising=False)
        else:
            monkeypatch.setenv("FOLD_DECODE_SCREEN", keep)
        cache = filled_cache(k.to(device), v.to(device), [700, 450], Hkv * G, depth=depth, v8=v8,
                             device=device)
        out, lse = fa.fold_attn_with_kvcache(q.to(device), cache, return_lse=True)
        runs[name] = (out.cpu(), lse.cpu(), cache.stats())
    (od, ld, sd), (on, ln, sn), (ok, lk, sk) = runs["depth"], runs["dense"], runs["kept"]
    same_as_dense = torch.equal(od.view(torch.int16), on.view(torch.int16)) and torch.equal(
        ld.view(torch.int32), ln.view(torch.int32))
    assert sn["live_frac"] == 1.0
    # With the screen kept, the depth cuts keys (so the two cases below differ in what ran, not in
    # the data).
    assert sk["live_frac"] < 1.0, sk
    if screened:
        assert sd == sk, (sd, sk)
        assert torch.equal(od.view(torch.int16), ok.view(torch.int16))
        assert not same_as_dense
    else:
        assert sd == sn, (sd, sn)
        assert same_as_dense

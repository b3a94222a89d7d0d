"""GPU: FoldKVCache.fork on a CUDA cache: forks (sharing the prompt's pages, the last partly
filled page copied on the device) continue with the bits of requests built from their own
tokens. Skipped without a CUDA device or a CUDA build."""

from __future__ import annotations

import pytest
import torch

from decode_helpers import bits16
from helpers import gpu_ready
from test_decode_fork import _play

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]


@pytest.mark.parametrize("kw", [dict(depth=16.0), dict(depth=None), dict(depth=12.0, v8=True, v_scale=1.0)],
                         ids=["depth16", "dense", "v8_fixed"])
@pytest.mark.parametrize("prompt", [200, 192])
def test_cuda_forks_continue_as_requests_of_their_own_tokens(kw, prompt):
    outs, cache, ref = _play(kw, prompt, forks=2, steps=80, device=torch.device("cuda"))
    for i, ((o, lse), (ro, rlse)) in enumerate(outs):
        assert torch.equal(bits16(o), bits16(ro)) and torch.equal(bits16(lse), bits16(rlse)), i
    assert torch.equal(cache.heavy_keys, ref.heavy_keys)

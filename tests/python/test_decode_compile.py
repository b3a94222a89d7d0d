"""torch integration of the decode step: the fold_attention::decode_step custom op passes
opcheck, and torch.compile(fullgraph=True) of an append + attend step gives the eager bits
and leaves the cache exactly as eager steps do. CPU here; the GPU file repeats it on CUDA."""

import pytest
import torch

import fold_attention as fa
from decode_helpers import synth
from helpers import gpu_ready


def _caches(device, n=2, depth=16.0, v8=False):
    B, Hkv, G, D, L = 3, 2, 4, 64, 300
    q, k, v = synth(B, Hkv, G, D, L, seed=5)
    out = []
    for _ in range(n):
        c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 320, depth=depth, v8=v8, device=device)
        for b, length in enumerate([300, 1, 130]):
            assert c.add_request(length=320) == b  # pages reserved for the compiled appends
            c.extend(b, k[b, :length].to(device), v[b, :length].to(device))
        out.append(c)
    return out


def _steps(B, H, Hkv, D, n, device):
    g = torch.Generator().manual_seed(11)
    mk = lambda *s: torch.randn(*s, generator=g).bfloat16().to(device)  # noqa: E731
    return [(mk(B, H, D), mk(B, Hkv, D), mk(B, Hkv, D)) for _ in range(n)]


def _same_cache(a, b):
    for name in ("k_a", "k_b", "k_scale", "v", "v_a", "v_b", "v_exp", "v_page_sum", "heavy_keys",
                 "page_table", "lengths"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x.view(torch.uint8) if x.dtype.is_floating_point else x,
                               y.view(torch.uint8) if y.dtype.is_floating_point else y), name


def test_decode_step_op_passes_opcheck():
    (c,) = _caches("cpu", n=1)
    q, k, v = _steps(3, 8, 2, 64, 1, "cpu")[0]
    args = (q, k, v, c.k_a, c.k_b, c.k_scale, c.v, c.v_a, c.v_b, c.v_exp, c.v_page_sum, c.heavy_keys,
            c.page_table, c.lengths, c._workspace, c._stats_dev, c.max_len, False, c.softmax_scale,
            c.depth, c.refine_band, c.refine_band + 2.0)
    # The op appends a token per call: opcheck calls it several times, so give it room.
    torch.library.opcheck(torch.ops.fold_attention.decode_step.default, args,
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.parametrize(
    "case,exc,arg",
    [
        ("q_head_dim", ValueError, "q must have shape"),
        ("q_batch", ValueError, "q must have shape"),
        ("q_heads", ValueError, "q must have shape"),
        ("q_dtype", TypeError, "q has dtype"),
        ("q_float32", TypeError, "q must be bfloat16"),
        ("q_strided", ValueError, "q must be contiguous"),
        ("k_batch", ValueError, "k_step must have shape"),
        ("v_dtype", TypeError, "v_step has dtype"),
        ("k_only", ValueError, "both k_step and v_step"),
        ("k_strided", ValueError, "k_step must be contiguous"),
    ],
)
def test_decode_step_op_checks_its_tensors_against_the_cache(case, exc, arg):
    """A direct call of the op (or a compiled step) takes its sizes from q's shape and the
    buffers': a q or k_step that does not match the cache must be refused, not read or write
    past the buffers (a head dim 128 q on a head dim 64 cache overwrote the heap)."""
    (c,) = _caches("cpu", n=1)
    q, k, v = _steps(3, 8, 2, 64, 1, "cpu")[0]
    if case == "q_head_dim":
        q = torch.randn(3, 8, 128).bfloat16()
    elif case == "q_batch":
        q = torch.randn(64, 8, 64).bfloat16()
    elif case == "q_heads":
        q = torch.randn(3, 7, 64).bfloat16()
    elif case == "q_dtype":
        q = q.half()
    elif case == "q_float32":
        q, k, v = q.float(), k.float(), v.float()
    elif case == "q_strided":
        q = torch.randn(3, 64, 8).bfloat16().transpose(1, 2)
    elif case == "k_batch":
        k = k[:1]
    elif case == "v_dtype":
        v = v.half()
    elif case == "k_only":
        v = None
    elif case == "k_strided":
        k = torch.randn(3, 64, 2).bfloat16().transpose(1, 2)
    before = [t.clone() for t in c._step_buffers()[:13] if isinstance(t, torch.Tensor)]
    with pytest.raises(exc, match=arg):
        torch.ops.fold_attention.decode_step(q, k, v, *c._step_buffers())
    after = [t for t in c._step_buffers()[:13] if isinstance(t, torch.Tensor)]
    for x, y in zip(before, after):
        assert torch.equal(x, y)  # refused before anything was written


def _compiled_matches_eager(device, depth, v8, backend):
    torch._dynamo.reset()
    eager, compiled = _caches(device, depth=depth, v8=v8)
    steps = _steps(3, 8, 2, 64, 4, device)

    def step(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True)

    fn = torch.compile(step, fullgraph=True, backend=backend)
    for q, k, v in steps:
        o1, l1 = step(eager, q, k, v)
        o2, l2 = fn(compiled, q, k, v)
        assert torch.equal(o1.view(torch.int16), o2.view(torch.int16))
        assert torch.equal(l1, l2)
    _same_cache(eager, compiled)
    assert compiled.lengths.tolist() == [304, 5, 134]
    assert compiled.stats() == eager.stats()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("depth,v8", [(16.0, False), (None, True)])
def test_compile_fullgraph_decode_step_matches_eager(backend, depth, v8):
    _compiled_matches_eager("cpu", depth, v8, backend)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready()[0], reason=gpu_ready()[1])
@pytest.mark.parametrize("depth,v8", [(16.0, False), (None, False), (12.0, True)])
def test_compile_fullgraph_decode_step_matches_eager_cuda(depth, v8):
    _compiled_matches_eager("cuda", depth, v8, "inductor")

"""torch integration of the training ops: registered custom ops with fake implementations
(opcheck), torch.compile(fullgraph=True) without graph breaks, same bits as eager."""

import pytest
import torch

import fold_attention  # noqa: F401  (registers fold_attention::fwd / ::bwd)
from fold_attention import fold_attn_func, fold_attn_varlen_func
from helpers import gpu_ready


def _inputs(dtype=torch.bfloat16, B=2, S=40, H=4, Hkv=2, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g).to(dtype)
    k = torch.randn(B, S, Hkv, D, generator=g).to(dtype)
    v = torch.randn(B, S, Hkv, D, generator=g).to(dtype)
    return q, k, v


def test_ops_are_registered_and_pass_opcheck():
    q, k, v = _inputs()
    scale = 64 ** -0.5
    torch.library.opcheck(torch.ops.fold_attention.fwd.default, (q, k, v, None, 40, True, scale))
    out, lse = torch.ops.fold_attention.fwd(q, k, v, None, 40, True, scale)
    dout = torch.randn_like(out)
    torch.library.opcheck(torch.ops.fold_attention.bwd.default,
                          (q, k, v, out, dout, lse, None, 40, True, scale))
    cu = torch.tensor([0, 13, 40], dtype=torch.int32)
    qv, kv, vv = (x[0] for x in (q, k, v))
    torch.library.opcheck(torch.ops.fold_attention.fwd.default, (qv, kv, vv, cu, 27, False, scale))


def _loss_and_grads(fn, q, k, v, *args, **kwargs):
    q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
    out = fn(q, k, v, *args, **kwargs)
    (out.float() * torch.linspace(-1, 1, out.shape[-1], device=out.device)).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_training_step_matches_eager_bitwise(backend):
    torch._dynamo.reset()
    q, k, v = _inputs()

    def step(q, k, v):
        return fold_attn_func(q, k, v, causal=True)

    eager = _loss_and_grads(step, q, k, v)
    compiled = _loss_and_grads(torch.compile(step, fullgraph=True, backend=backend), q, k, v)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_compile_fullgraph_recompiles_for_new_scales_and_head_dims():
    """A scale that changes between calls, or a head dim that does (the default scale then
    follows it), makes dynamo trace them symbolically: the call must still work, with eager's
    bits (the scale is checked and rounded to float32 by the op, as eagerly)."""
    torch._dynamo.reset()

    def step(q, k, v, scale):
        return fold_attn_func(q, k, v, causal=True, softmax_scale=scale)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    q, k, v = _inputs(dtype=torch.float32, S=9, D=16)
    for scale in (0.25, 0.3, 1.0 / 3.0):  # 1/3: not a float32 value, rounded like eager
        eager = _loss_and_grads(step, q, k, v, scale)
        got = _loss_and_grads(compiled, q, k, v, scale)
        for a, b in zip(eager, got):
            assert torch.equal(a, b)
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for D in (16, 32, 8):
        q, k, v = _inputs(dtype=torch.float32, S=9, D=D, seed=D)
        eager = _loss_and_grads(step, q, k, v, None)
        got = _loss_and_grads(compiled, q, k, v, None)
        for a, b in zip(eager, got):
            assert torch.equal(a, b)


@pytest.mark.parametrize("varlen", [False, True])
def test_compile_fullgraph_dynamic_true_matches_eager(varlen):
    torch._dynamo.reset()
    if varlen:
        def step(q, k, v, cu):
            return fold_attn_varlen_func(q, k, v, cu, causal=True)
    else:
        def step(q, k, v, scale):
            return fold_attn_func(q, k, v, causal=True, softmax_scale=scale)

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    for S in (6, 9, 14):
        q, k, v = _inputs(dtype=torch.float32, S=S, D=16, seed=S)
        if varlen:
            q, k, v = (x[0] for x in (q, k, v))
            arg = torch.tensor([0, S // 2, S], dtype=torch.int32)
        else:
            arg = 0.3
        eager = _loss_and_grads(step, q, k, v, arg)
        got = _loss_and_grads(compiled, q, k, v, arg)
        for a, b in zip(eager, got):
            assert torch.equal(a, b)


def test_compile_with_a_symbolic_bad_scale_is_refused_when_it_runs():
    """A scale traced symbolically is not read while tracing: the op refuses a bad value when the
    graph runs (a float32 overflow, a negative scale), as the eager call does."""
    torch._dynamo.reset()

    def step(q, k, v, scale):
        return fold_attn_func(q, k, v, softmax_scale=scale)

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    q, k, v = _inputs(dtype=torch.float32, S=5, D=16)
    compiled(q, k, v, 0.25)
    for bad in (1e39, -0.5):
        with pytest.raises(ValueError, match="softmax_scale"):
            compiled(q, k, v, bad)
        with pytest.raises(ValueError, match="softmax_scale"):
            step(q, k, v, bad)


def test_compile_fullgraph_varlen_with_max_seqlen():
    torch._dynamo.reset()
    q, k, v = (x[0] for x in _inputs(S=50))
    cu = torch.tensor([0, 7, 31, 50], dtype=torch.int32)

    def step(q, k, v, cu):
        return fold_attn_varlen_func(q, k, v, cu, max_seqlen=24, causal=True)

    eager = _loss_and_grads(step, q, k, v, cu)
    compiled = _loss_and_grads(torch.compile(step, fullgraph=True, backend="aot_eager"), q, k, v, cu)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def _varlen_compiled_matches_eager(device, backend, max_seqlen):
    torch._dynamo.reset()
    q, k, v = (x[0].to(device) for x in _inputs(S=300, H=4, Hkv=2, D=64))
    cu = torch.tensor([0, 7, 7, 190, 191, 300], dtype=torch.int32, device=device)

    def eager_step(q, k, v, cu):  # eager checks max_seqlen against cu_seqlens: pass none
        return fold_attn_varlen_func(q, k, v, cu, causal=True)

    def step(q, k, v, cu):
        return fold_attn_varlen_func(q, k, v, cu, max_seqlen=max_seqlen, causal=True)

    eager = _loss_and_grads(eager_step, q, k, v, cu)
    compiled = _loss_and_grads(torch.compile(step, fullgraph=True, backend=backend), q, k, v, cu)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_compile_varlen_without_max_seqlen():
    # While tracing the packed length stands in for the longest request.
    _varlen_compiled_matches_eager("cpu", "aot_eager", None)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready()[0], reason="needs a CUDA GPU and a CUDA build")
@pytest.mark.parametrize("max_seqlen", [None, 183, 8])  # 8: too short, and not trusted
def test_compile_fullgraph_varlen_on_cuda_matches_eager_bitwise(max_seqlen):
    _varlen_compiled_matches_eager("cuda", "inductor", max_seqlen)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_ready()[0], reason="needs a CUDA GPU and a CUDA build")
def test_compile_fullgraph_on_cuda_matches_eager_bitwise():
    torch._dynamo.reset()
    q, k, v = (x.cuda() for x in _inputs(S=256, D=128))

    def step(q, k, v):
        return fold_attn_func(q, k, v, causal=True)

    eager = _loss_and_grads(step, q, k, v)
    compiled = _loss_and_grads(torch.compile(step, fullgraph=True), q, k, v)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_direct_op_calls_with_mismatched_tensors_are_refused():
    q, k, v = _inputs()
    scale = 64 ** -0.5
    with pytest.raises(ValueError, match="do not form an attention call"):
        torch.ops.fold_attention.fwd(q, k[:, :2], v[:, :2], None, 40, True, scale)
    for dtype in (torch.float64, torch.int32):  # (a dtype the library has no code for)
        with pytest.raises(TypeError, match="q has dtype"):
            torch.ops.fold_attention.fwd(q.to(dtype), k.to(dtype), v.to(dtype), None, 40, True, scale)
    out, lse = torch.ops.fold_attention.fwd(q, k, v, None, 40, True, scale)
    with pytest.raises(ValueError, match="lse must be float32"):
        torch.ops.fold_attention.bwd(q, k, v, out, out, torch.zeros(1), None, 40, True, scale)
    with pytest.raises(ValueError, match="lse must be float32"):  # the user-facing (B, H, S) view
        torch.ops.fold_attention.bwd(q, k, v, out, out, lse.view(4, 2, 40).permute(1, 0, 2),
                                     None, 40, True, scale)
    cu = torch.tensor([0, 13, 40], dtype=torch.int32)
    for seqlen in (2**40, -1):  # (the C ABI's int32 would wrap 2**40 to 0)
        with pytest.raises(ValueError, match="seqlen must be in"):
            torch.ops.fold_attention.fwd(q[0], k[0], v[0], cu, seqlen, True, scale)
    for bad in (1e39, -1.0, float("nan")):  # a scale the Python API would refuse
        with pytest.raises(ValueError, match="softmax_scale"):
            torch.ops.fold_attention.fwd(q, k, v, None, 40, True, bad)


def test_huge_logits_give_finite_gradients():
    # Review finding: logits of ~1e7 left P > 1 after the LSE round trip (inf gradients).
    for dtype, mag in ((torch.float16, 1000.0), (torch.bfloat16, 10000.0)):
        q, k, v = _inputs(dtype=dtype, S=64, D=128)
        q, k = (q.float() * mag).to(dtype), (k.float() * 1.0).to(dtype)
        _, dq, dk, dv = _loss_and_grads(lambda q, k, v: fold_attn_func(q, k, v, causal=True), q, k, v)
        for g in (dq, dk, dv):
            assert torch.isfinite(g.float()).all()

"""Attention sinks (gpt-oss) on the CPU reference: forward and gradients (the sinks' included)
against a float64 attention with the sink column written out, as transformers' eager gpt-oss
attention computes it; windows and sinks together; packed sequences' bits; torch.compile;
argument errors; transformers' s_aux (the CUDA kernels: test_gpu_sinks.py)."""

import pytest
import torch

import fold_attention as fa
from helpers import window_mask


def _inputs(b, s, h, hk, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, h, d, generator=g).to(dtype)
    k = torch.randn(b, s, hk, d, generator=g).to(dtype)
    v = torch.randn(b, s, hk, d, generator=g).to(dtype)
    sinks = torch.randn(h, generator=g) * 2
    return q, k, v, sinks


def _ref(q, k, v, sinks, causal, window=(-1, -1)):
    """float64: the logits with the sink as one more column, softmax, the sink's column dropped
    (transformers' eager_attention_forward for gpt-oss), (B, S, H, D) in and out."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (x.double().transpose(1, 2) for x in (q, k, v))
    kt, vt = (x.repeat_interleave(group, dim=1) for x in (kt, vt))
    S = q.shape[1]
    logits = qt @ kt.transpose(-1, -2) * q.shape[-1] ** -0.5
    logits = logits.masked_fill(~window_mask(S, causal, window, device="cpu"), float("-inf"))
    col = sinks.double().reshape(1, -1, 1, 1).expand(q.shape[0], -1, S, 1)
    probs = torch.softmax(torch.cat([logits, col], dim=-1), dim=-1)[..., :-1]
    lse = torch.logsumexp(torch.cat([logits, col], dim=-1), dim=-1)  # (B, H, S)
    return (probs @ vt).transpose(1, 2), lse


@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (True, (12, 0))])
def test_sinks_match_the_sink_column_written_out(causal, window):
    q, k, v, sinks = _inputs(2, 45, 4, 2, 32, seed=1)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, sinks)]
    out, lse = fa.fold_attn_func(*leaves[:3], causal=causal, window_size=window, sinks=leaves[3],
                                 return_lse=True)
    ref_leaves = [x.double().requires_grad_() for x in (q, k, v, sinks)]
    ref, ref_lse = _ref(*ref_leaves, causal, window)
    assert (out.double() - ref).abs().max() < 2e-5
    assert (lse.double() - ref_lse).abs().max() < 2e-5
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, dout)
    ref_grads = torch.autograd.grad(ref, ref_leaves, dout.double())
    for name, g, r in zip(("q", "k", "v", "sinks"), grads, ref_grads):
        assert g.dtype == torch.float32
        err = (g.double() - r).norm() / r.norm()
        assert err < 2e-5, (name, float(err))


def test_sinks_in_bf16_with_bf16_parameters():
    """Model-dtype sinks (a bf16 parameter): the gradient comes back in bf16, near float64's."""
    q, k, v, sinks = _inputs(1, 64, 4, 1, 64, torch.bfloat16, seed=2)
    sinks = sinks.bfloat16().requires_grad_()
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = fa.fold_attn_func(q, k, v, causal=True, sinks=sinks)
    dout = torch.randn_like(out)
    (ds,) = torch.autograd.grad(out, (sinks,), dout)
    assert ds.dtype == torch.bfloat16
    ref_leaves = [x.detach().double().requires_grad_() for x in (q, k, v, sinks)]
    ref, _ = _ref(*ref_leaves, True)
    (rs,) = torch.autograd.grad(ref, (ref_leaves[3],), dout.double())
    assert (ds.double() - rs).norm() / rs.norm() < 3e-2


def test_varlen_sinks_are_per_head_and_sequences_keep_their_bits():
    lens = [20, 33, 7]
    q, k, v, sinks = _inputs(1, sum(lens), 4, 2, 16, seed=3)
    q, k, v = (x[0] for x in (q, k, v))
    cu = torch.tensor([0, 20, 53, 60], dtype=torch.int32)
    packed = fa.fold_attn_varlen_func(q, k, v, cu, causal=True, sinks=sinks)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        alone = fa.fold_attn_func(q[a:b][None], k[a:b][None], v[a:b][None], causal=True, sinks=sinks)
        assert torch.equal(alone[0], packed[a:b])


def test_sink_gradient_is_deterministic_and_minus_inf_is_no_sink():
    q, k, v, sinks = _inputs(2, 30, 2, 2, 16, seed=4)
    s1 = sinks.clone().requires_grad_()
    s2 = sinks.clone().requires_grad_()
    d = torch.randn(2, 30, 2, 16)
    g1 = torch.autograd.grad(fa.fold_attn_func(q, k, v, causal=True, sinks=s1), (s1,), d)[0]
    g2 = torch.autograd.grad(fa.fold_attn_func(q, k, v, causal=True, sinks=s2), (s2,), d)[0]
    assert torch.equal(g1, g2)
    none = torch.full((2,), float("-inf"))
    assert torch.equal(fa.fold_attn_func(q, k, v, causal=True, sinks=none),
                       fa.fold_attn_func(q, k, v, causal=True))


def test_sinks_under_torch_compile_give_the_eager_bits():
    q, k, v, sinks = _inputs(2, 24, 2, 1, 16, seed=6)

    def f(q, k, v, s):
        return fa.fold_attn_func(q, k, v, causal=True, sinks=s)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    a = [x.clone().requires_grad_() for x in (q, k, v, sinks)]
    b = [x.clone().requires_grad_() for x in (q, k, v, sinks)]
    eager, comp = f(*a), compiled(*b)
    assert torch.equal(eager, comp)
    d = torch.randn_like(eager)
    eager.backward(d)
    comp.backward(d)
    assert all(torch.equal(x.grad, y.grad) for x, y in zip(a, b))


@pytest.mark.parametrize(
    "sinks,exc,match",
    [
        (torch.zeros(3), ValueError, r"sinks must have shape \(4,\)"),
        (torch.zeros(4, 1), ValueError, r"sinks must have shape"),
        (torch.zeros(4, dtype=torch.int32), TypeError, "sinks must be a floating tensor"),
        ([0.0] * 4, TypeError, "sinks must be a torch.Tensor"),
        (torch.zeros(4, device="meta"), ValueError, "sinks is on meta"),
    ],
)
def test_bad_sinks_are_named(sinks, exc, match):
    q, k, v, _ = _inputs(1, 8, 4, 2, 16)
    with pytest.raises(exc, match=match):
        fa.fold_attn_func(q, k, v, sinks=sinks)


def test_direct_op_checks_its_sinks():
    q, k, v, _ = _inputs(1, 8, 4, 2, 16)
    with pytest.raises(ValueError, match="sinks must be float32"):
        torch.ops.fold_attention.fwd(q, k, v, None, 8, True, 0.25, 0, 0, torch.zeros(4).double())

"""The eager route of the training calls (training.py's _EagerAttention) against the custom ops'
route (unset, the default since session 44, against FOLD_EAGER_AUTOGRAD=0): the same bits
forward and backward (sinks' gradient included), which route a call takes, and the errors both
give (double backward). CPU reference here; on CUDA the GPU suite ran on both routes (session 44:
the gradient hashes of both routes equal)."""

import pytest
import torch

import fold_attention as fa
from helpers import assert_bitwise_equal, make_dense, make_varlen


@pytest.fixture
def route(monkeypatch):
    def set_route(name):
        if name == "fn":
            monkeypatch.delenv("FOLD_EAGER_AUTOGRAD", raising=False)
        else:
            monkeypatch.setenv("FOLD_EAGER_AUTOGRAD", "0")
    return set_route


def _grads(call, inputs, dout):
    out = call()
    return (out, *torch.autograd.grad(out, inputs, dout))


CASES = [  # (dtype, causal, window, sinks, H, Hkv)
    (torch.bfloat16, True, (-1, -1), False, 4, 2),
    (torch.float32, False, (-1, -1), False, 2, 2),
    (torch.float16, True, (5, 0), True, 4, 1),
    (torch.float32, False, (3, 2), True, 6, 3),
]


@pytest.mark.parametrize("dtype,causal,window,with_sinks,H,Hkv", CASES)
def test_dense_routes_give_the_same_bits(route, dtype, causal, window, with_sinks, H, Hkv):
    q, k, v, dout = make_dense(2, 37, H, Hkv, 64, dtype, seed=3)
    sinks = torch.randn(H, generator=torch.Generator().manual_seed(5)) if with_sinks else None
    inputs = [x.requires_grad_(True) for x in (q, k, v)] + ([sinks.requires_grad_(True)]
                                                            if with_sinks else [])
    results = {}
    for name in ("fn", "ops"):
        route(name)
        results[name] = _grads(lambda: fa.fold_attn_func(q, k, v, causal=causal, window_size=window,
                                                         sinks=sinks), inputs, dout)
    for what, a, b in zip(("out", "dq", "dk", "dv", "dsinks"), results["fn"], results["ops"]):
        assert_bitwise_equal(a, b, what)


def test_varlen_routes_give_the_same_bits_and_lse(route):
    lengths = [5, 0, 33, 17]
    q, k, v, dout, cu = make_varlen(lengths, 4, 2, 64, torch.bfloat16, seed=7)
    inputs = [x.requires_grad_(True) for x in (q, k, v)]
    results = {}
    for name in ("fn", "ops"):
        route(name)
        out, lse = fa.fold_attn_varlen_func(q, k, v, cu, causal=True, window_size=(8, 0),
                                            return_lse=True)
        results[name] = (out, lse, *torch.autograd.grad(out, inputs, dout))
        assert not lse.requires_grad
    for what, a, b in zip(("out", "lse", "dq", "dk", "dv"), results["fn"], results["ops"]):
        assert_bitwise_equal(a, b, what)


def test_the_route_taken(route):
    q, k, v = (x.requires_grad_(True) for x in make_dense(1, 8, 2, 2, 64, torch.float32)[:3])
    route("fn")
    assert "EagerAttention" in type(fa.fold_attn_func(q, k, v).grad_fn).__name__
    # A torch function mode (here torch.device's) is a trace the custom ops serve: their route.
    with torch.device("cpu"):
        assert "fold_attention" in type(fa.fold_attn_func(q, k, v).grad_fn).__name__
    route("ops")
    assert "fold_attention" in type(fa.fold_attn_func(q, k, v).grad_fn).__name__


def test_an_unused_output_gives_zero_gradients(route):
    """Only the LSE reaches the loss (it is not differentiable), or nothing: the backward gets
    no gradient for out and must give zeros or nothing, never fail."""
    q, k, v = (x.requires_grad_(True) for x in make_dense(1, 8, 2, 2, 64, torch.float32)[:3])
    for name in ("fn", "ops"):
        route(name)
        out, lse = fa.fold_attn_func(q, k, v, causal=True, return_lse=True)
        (out.sum() * 0 + lse.sum()).backward()
        assert q.grad is not None and not q.grad.any()
        q.grad = k.grad = v.grad = None


@pytest.mark.parametrize("name", ["fn", "ops"])
@pytest.mark.parametrize("how", ["backward", "grad"])
def test_double_backward_is_refused(route, name, how):
    """A second-order gradient through the attention raises on both routes, whether taken by
    backward() beside another term or by autograd.grad (never None, zero or a constant)."""
    q, k, v = (x.requires_grad_(True) for x in make_dense(1, 8, 2, 2, 64, torch.float32)[:3])
    route(name)
    out = fa.fold_attn_func(q, k, v, causal=True)
    dq, = torch.autograd.grad(out.square().sum(), (q,), create_graph=True)
    assert dq.requires_grad
    with pytest.raises(RuntimeError):
        if how == "backward":
            (dq.sum() + q.sum()).backward()
        else:
            torch.autograd.grad(dq.square().sum(), (q,), allow_unused=True)


def test_a_functorch_transform_over_another_argument(route):
    """torch.func.grad over a weight the attention's inputs do not carry: the eager route must
    step aside for the ops' (an autograd.Function without setup_context cannot run under it)."""
    q, k, v, _ = make_dense(1, 9, 2, 1, 64, torch.float32, seed=2)
    w = torch.tensor(1.5)
    results = []
    for name in ("fn", "ops"):
        route(name)
        results.append(torch.func.grad(lambda w: (fa.fold_attn_func(q, k, v) * w).sum())(w))
    assert_bitwise_equal(results[0], results[1], "d w")


@pytest.mark.parametrize("name", ["fn", "ops"])
def test_cu_seqlens_changed_in_place_before_the_backward_raises(route, name):
    q, k, v, dout, cu = make_varlen([5, 9], 2, 2, 64, torch.float32, seed=3)
    inputs = [x.requires_grad_(True) for x in (q, k, v)]
    route(name)
    out = fa.fold_attn_varlen_func(q, k, v, cu, causal=True)
    cu[1] = 7
    with pytest.raises(RuntimeError, match="inplace"):
        torch.autograd.grad(out, inputs, dout)


def test_saved_tensor_hooks_that_change_the_layout(route):
    """A pack / unpack hook pair (activation offloading does this) that hands back 2-D saved
    tensors transposed-and-back (non-contiguous): both routes give the same bits."""
    q, k, v, dout = make_dense(1, 12, 4, 2, 64, torch.float32, seed=9)
    inputs = [x.requires_grad_(True) for x in (q, k, v)]

    def unpack(x):
        return x.t().contiguous().t() if x.dim() == 2 else x

    results = []
    for name in ("fn", "ops"):
        route(name)
        with torch.autograd.graph.saved_tensors_hooks(lambda x: x, unpack):
            results.append(_grads(lambda: fa.fold_attn_func(q, k, v, causal=True), inputs, dout))
    for what, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert_bitwise_equal(a, b, what)


def test_activation_checkpointing_gives_the_same_bits(route):
    """torch.utils.checkpoint (non-reentrant: saved-tensor hooks) re-runs the forward in the
    backward: both routes, with and without it, give the same gradients."""
    from torch.utils.checkpoint import checkpoint

    q, k, v, dout = make_dense(1, 21, 4, 2, 64, torch.bfloat16, seed=11)
    inputs = [x.requires_grad_(True) for x in (q, k, v)]

    def attn(q, k, v):
        return fa.fold_attn_func(q, k, v, causal=True, window_size=(6, 0)) * 2

    results = []
    for name in ("fn", "ops"):
        route(name)
        results.append(_grads(lambda: attn(q, k, v), inputs, dout))
        results.append(_grads(lambda: checkpoint(attn, q, k, v, use_reentrant=False), inputs,
                              dout))
    for r in results[1:]:
        for what, a, b in zip(("out", "dq", "dk", "dv"), results[0], r):
            assert_bitwise_equal(a, b, what)


@pytest.mark.parametrize("name", ["fn", "ops"])
def test_a_second_derivative_through_the_sinks_gradient_raises(route, name):
    """The sinks' gradient formula reads the LSE, which is not differentiable: torch's
    derivative of it would be wrong (it misses the LSE's dependence on the sinks), so a second
    differentiation raises on both routes instead of returning it."""
    q, k, v, _ = make_dense(1, 10, 2, 2, 64, torch.float32, seed=4)
    sinks = torch.randn(2, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    route(name)
    out = fa.fold_attn_func(q, k, v, causal=True, sinks=sinks)
    ds, = torch.autograd.grad(out.square().sum(), (sinks,), create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(ds.sum(), (sinks,), allow_unused=True)

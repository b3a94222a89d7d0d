"""Training gradients on real-model attention inputs (CPU): the SmolLM2 capture's post-RoPE K / V of
a layer's first S tokens and its captured queries (tiled over the positions), causal, bf16, a
random upstream gradient; relative errors of out / dQ / dK / dV against float64 for torch SDPA
(bf16, the CPU's kernel) and fold_attn_func (the CPU reference, whose integer grid rule the CUDA
kernels share), and the issue's bar (1.05x SDPA's error + 1e-5).

    python3 scripts/real_capture_gradients.py [S]      (S = 2048 by default; needs a capture)

Session 39 (benchmarks/results/session39/real_grad/): every layer within the bar at S 1024 and
2048 (dQ 0.93-0.99x SDPA's error, dK 0.50-0.69x, dV 0.34-0.55x): the grid's one scale per
(request, KV head) costs nothing measurable on these real inputs (max|K| ~ a typical key's norm).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.decode import first_capture_or_exit
import fold_attention as fa
torch.manual_seed(0)
cap = first_capture_or_exit()
m = cap.meta; H, Hk, D = m['n_heads'], m['n_kv_heads'], m['head_dim']; G = H // Hk
S = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
scale = m.get('softmax_scale', D ** -0.5)
def ref64(q, k, v, do):
    q, k, v, do = (x.double().requires_grad_(x is not do) for x in (q, k, v, do))
    kk = k.repeat_interleave(G, dim=2); vv = v.repeat_interleave(G, dim=2)
    s = torch.einsum('bshd,bthd->bhst', q, kk) * scale
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float('-inf'))
    p = s.softmax(-1)
    o = torch.einsum('bhst,bthd->bshd', p, vv)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
def sdpa_bf16(q, k, v, do):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1,2), k.transpose(1,2), v.transpose(1,2), is_causal=True, scale=scale, enable_gqa=True).transpose(1,2)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
def fold_bf16(q, k, v, do):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    o = fa.fold_attn_func(q, k, v, causal=True, softmax_scale=scale)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
rel = lambda a, b: float((a.double() - b).norm() / b.norm())
for layer in cap.layer_ids:
    k, v = cap.kv(layer, S)                      # (S, Hk, D)
    # queries: the capture keeps q only at some positions; use the layer's keys' statistics? No:
    # take q at every captured position < S and tile (real q rows), else random rows of q scale.
    qpos = [p for p in m['query_positions'] if p < S]
    qs = torch.stack([cap.q_at(layer, p) for p in qpos])   # (n, H, D)
    idx = torch.arange(S) % len(qpos)
    q = qs[idx].unsqueeze(0).bfloat16()                   # (1, S, H, D)
    k = k.unsqueeze(0).bfloat16(); v = v.unsqueeze(0).bfloat16()
    do = (torch.randn(1, S, H, D) * 0.1).bfloat16()
    r = ref64(q, k, v, do)
    a = sdpa_bf16(q, k, v, do); f = fold_bf16(q, k, v, do)
    names = ('out', 'dq', 'dk', 'dv')
    print(f"layer {layer} S={S}: max|K| {float(k.abs().max()):.1f} (median row norm {float(k.float().norm(dim=-1).median()):.1f}), max|V| {float(v.abs().max()):.2f}")
    for i, n in enumerate(names):
        es, ef = rel(a[i], r[i]), rel(f[i], r[i])
        print(f"   {n}: sdpa bf16 {es:.3e}  fold {ef:.3e}  ratio {ef/es:.2f}  (bar 1.05x + 1e-5: {'ok' if ef <= 1.05*es + 1e-5 else 'MISS'})")

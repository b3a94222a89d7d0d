import torch, fold_attention as fa
for s in (1e-30, 1e-33):
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        q = torch.randn(2, 256, 8, 128, device="cuda").to(dtype).requires_grad_()
        k = torch.randn(2, 256, 2, 128, device="cuda").to(dtype).requires_grad_()
        v = (torch.randn(2, 256, 2, 128, device="cuda") * s).to(dtype)
        g = torch.randn(2, 256, 8, 128, device="cuda").to(dtype)
        fa.fold_attn_func(q, k, v, causal=True).backward(g)
        q2, k2 = (x.detach().double().requires_grad_() for x in (q, k))
        ref = torch.nn.functional.scaled_dot_product_attention(
            q2.transpose(1, 2), k2.transpose(1, 2).repeat_interleave(4, 1),
            v.double().transpose(1, 2).repeat_interleave(4, 1), is_causal=True).transpose(1, 2)
        ref.backward(g.double())
        e = lambda a, b: ((a.double() - b).norm() / b.norm()).item()
        print(f"V x {s:g} {dtype}: dq rel err {e(q.grad, q2.grad):.3g}, dk rel err {e(k.grad, k2.grad):.3g}")

"""Which CUDA kernels a training backward launches, per head dim, under the current settings
(FOLD_BWD_VARIANT etc. as set in the environment): the names from torch.profiler, so a run can
confirm which main kernel the launcher picked (the warp-specialised one's name contains
"backward_ws_kernel", the synchronous one's "backward_sm90_kernel").

    python3 scripts/backward_kernel_names.py            (needs a GPU)
"""
import re

import torch
from torch.profiler import ProfilerActivity, profile

import fold_attention as fa


def short(name):
    m = re.search(r"(\w+_kernel)(<[^>]*>)?", name)
    return m.group(0)[:90] if m else name[:60]


def main():
    dev = "cuda"
    for d in (64, 96, 128):
        g = torch.Generator(device=dev).manual_seed(d)
        mk = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16, generator=g)  # noqa: E731
        q, k, v = (mk(2, 1024, 8, d).requires_grad_(True) for _ in range(3))
        out = fa.fold_attn_func(q, k, v, causal=True)
        do = torch.randn_like(out)
        torch.autograd.grad(out, (q, k, v), do, retain_graph=True)  # warm-up
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
            torch.cuda.synchronize()
        names = [short(e.name) for e in prof.events() if e.device_type.name == "CUDA"]
        print(f"D {d}: " + "; ".join(dict.fromkeys(names)))


if __name__ == "__main__":
    main()

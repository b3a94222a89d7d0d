"""One line per case: the SHA-256 of the bits of dq, dk, dv (and of out) of the CUDA training
kernels on fixed random inputs. Run it with two builds of the library (FOLD_ATTENTION_LIBRARY)
and diff the outputs to check that a change keeps every bit (D 64 / 96 / 128 / 256, causal and
full, dense GQA and varlen, bf16 and fp16, ragged lengths).

    python3 scripts/grad_hashes.py > a.txt    (needs a GPU)
"""
import hashlib

import torch

import fold_attention as fa


def digest(*ts):
    h = hashlib.sha256()
    for t in ts:
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    dev = "cuda"
    for dtype in (torch.bfloat16, torch.float16):
        for d in (64, 96, 128, 256):
            for causal in (True, False):
                g = torch.Generator(device=dev).manual_seed(d + 7 * causal)
                mk = lambda *s: torch.randn(*s, device=dev, dtype=dtype, generator=g)  # noqa: E731
                q, k, v = mk(2, 777, 8, d), mk(2, 777, 2, d), mk(2, 777, 2, d)
                do = mk(2, 777, 8, d)
                q, k, v = (x.requires_grad_(True) for x in (q, k, v))
                out = fa.fold_attn_func(q, k, v, causal=causal)
                grads = torch.autograd.grad(out, (q, k, v), do)
                print(f"dense {dtype} D{d} causal={causal} out {digest(out)} grads {digest(*grads)}")
                lens = [1, 300, 1030, 64, 129]
                cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device=dev)
                t = int(cu[-1])
                q, k, v = mk(t, 6, d), mk(t, 3, d), mk(t, 3, d)
                do = mk(t, 6, d)
                q, k, v = (x.requires_grad_(True) for x in (q, k, v))
                out = fa.fold_attn_varlen_func(q, k, v, cu, causal=causal)
                grads = torch.autograd.grad(out, (q, k, v), do)
                print(f"varlen {dtype} D{d} causal={causal} out {digest(out)} grads {digest(*grads)}")


if __name__ == "__main__":
    main()

"""Could a decode screen skip whole chunks of keys from per-chunk summaries? (CPU study)

ALGORITHMS.md section 3 names it as the way past plane A's ~3.9x: skip screening blocks of keys
whose weight is surely below the cut, while still accounting for their mass. This measures it
on a real capture in float64, with the exact LSE as Z (the declared reference approximates it):

- which chunks (C keys, aligned) hold no live key at `depth` for any row of the group: the most a
  chunk skip could save;
- how many of them three guaranteed upper bounds on a chunk's logits would skip (a ball around
  the chunk mean; per-dimension boxes in the keys' own basis and in the Hadamard basis), and how
  many a statistical rule would (mean logit + alpha x the per-dimension spread, in the Hadamard
  basis; not a bound), with the chunks holding key 0, the newest key or one of the 8 largest-norm
  keys never skipped (the cache's heavy-key list);
- the output error of the screened step (live keys exact, cut keys' exact mass x their page's mean
  V) and of the same with the statistical rule's chunks skipped, their mass estimated as
  count x 2^(q.mu + ln2 / 2 sigma^2 - Z) (a lognormal guess).

    python3 scripts/decode_block_skip_study.py [--chunk 64] [--depth 16] [--alpha 3]

Session 39's run (notes/decode.md section 48): no chunk passes any guaranteed bound; the
statistical rule skips 8-49% of chunks, and at alpha 3 it raised layer 14's worst error 2.4x.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks.decode import first_capture_or_exit  # noqa: E402

PAGE = 256
HEAVY = 8


def hadamard(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)


def group_case(q, k, v, C, depth, alpha, Hd):
    """One (request, KV head) at one query position: q (G, D) base-2 logit multipliers folded
    in, k / v (n, D). Returns counts and errors."""
    n, D = k.shape
    G = q.shape[0]
    s = q @ k.T
    Z = torch.logsumexp(s * math.log(2), 1) / math.log(2)
    w = torch.exp2(s - Z[:, None])
    exact = (w @ v) / w.sum(1, keepdim=True)
    live = (s >= (Z - depth)[:, None]).any(0)
    nc = (n + C - 1) // C
    pad = nc * C - n
    kp = torch.cat([k, k[-1:].expand(pad, D)]) if pad else k
    kc = kp.view(nc, C, D)
    lc = (torch.cat([live, torch.ones(pad, dtype=torch.bool)]) if pad else live).view(nc, C)
    all_cut = ~lc.any(1)
    thr = (Z - depth)[:, None]
    mu = kc.mean(1)
    radius = (kc - mu[:, None]).norm(dim=2).max(1).values
    bounds = {
        "ball": q @ mu.T + q.norm(dim=1)[:, None] * radius[None],
        "box": torch.maximum(q[:, None] * kc.min(1).values[None], q[:, None] * kc.max(1).values[None]).sum(2),
    }
    kh, qh = kc @ Hd, q @ Hd
    bounds["box_h"] = torch.maximum(qh[:, None] * kh.min(1).values[None], qh[:, None] * kh.max(1).values[None]).sum(2)
    mean_h = qh @ kh.mean(1).T
    sigma = (qh[:, None] ** 2 * kh.var(1, unbiased=False)[None]).sum(2).sqrt()
    keep = torch.zeros(nc, dtype=torch.bool)
    keep[0] = keep[-1] = True
    keep[torch.topk(k.norm(dim=1), min(HEAVY, n)).indices // C] = True
    stat = ((mean_h + alpha * sigma) < thr).all(0) & ~keep
    counts = {"chunks": nc, "all_cut": int(all_cut.sum()), "stat": int(stat.sum()),
              "stat_with_live": int((stat & ~all_cut).sum())}
    for name, U in bounds.items():
        counts[name] = int((U < thr).all(0).sum())

    page = torch.arange(n) // PAGE
    npg = int(page[-1]) + 1
    vmean = torch.zeros(npg, D, dtype=torch.float64).index_add_(0, page, v)
    vmean /= torch.bincount(page, minlength=npg)[:, None]

    def output(read, extra_mass=None):
        wl = w * (live & read)[None]
        cut_mass = torch.zeros(G, npg, dtype=torch.float64).index_add_(1, page, w * (~live & read)[None])
        if extra_mass is not None:
            cut_mass = cut_mass + extra_mass
        return (wl @ v + cut_mass @ vmean) / (wl.sum(1) + cut_mass.sum(1))[:, None]

    def rel(x):
        return float((x - exact).norm() / exact.norm())

    everything = torch.ones(n, dtype=torch.bool)
    skipped = stat[torch.arange(n) // C]
    count = torch.zeros(nc, dtype=torch.float64).index_add_(0, torch.arange(n) // C, torch.ones(n, dtype=torch.float64))
    guess = count[None] * torch.exp2(mean_h + 0.5 * math.log(2) * sigma ** 2 - Z[:, None]) * stat[None]
    chunk_page = (torch.arange(nc) * C) // PAGE
    guess_pages = torch.zeros(G, npg, dtype=torch.float64).index_add_(1, chunk_page, guess)
    errors = {"screen": rel(output(everything)), "skip": rel(output(~skipped, guess_pages))}
    return counts, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--depth", type=float, default=16.0)
    ap.add_argument("--alpha", type=float, default=3.0)
    ap.add_argument("--start", type=int, default=2047, help="first query position")
    ap.add_argument("--stride", type=int, default=3, help="every stride-th captured query position")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    cap = first_capture_or_exit()
    m = cap.meta
    H, Hk, D = m["n_heads"], m["n_kv_heads"], m["head_dim"]
    G = H // Hk
    mult = m.get("softmax_scale", D ** -0.5) / math.log(2)  # base-2 logits
    Hd = hadamard(D)
    positions = [p for p in m["query_positions"] if p >= args.start][:: args.stride]
    print(f"capture {cap.capture_id}, C={args.chunk} depth={args.depth} alpha={args.alpha}, "
          f"{len(positions)} positions from {positions[0]}")
    for layer in cap.layer_ids:
        tot, errs = {}, {"screen": [], "skip": []}
        for p in positions:
            qa = cap.q_at(layer, p).double() * mult
            k, v = (x.double() for x in cap.kv(layer, p + 1))
            for hk in range(Hk):
                c, e = group_case(qa[hk * G:(hk + 1) * G], k[:, hk], v[:, hk], args.chunk, args.depth,
                                  args.alpha, Hd)
                for key, x in c.items():
                    tot[key] = tot.get(key, 0) + x
                for key, x in e.items():
                    errs[key].append(x)
        f = {key: tot[key] / tot["chunks"] for key in tot}
        med = {key: sorted(a)[len(a) // 2] for key, a in errs.items()}
        print(f"layer {layer}: chunks with no live key {f['all_cut']:.3f}; skipped by ball {f['ball']:.3f}, "
              f"box {f['box']:.3f}, box (Hadamard) {f['box_h']:.3f}; statistical {f['stat']:.3f} "
              f"({f['stat_with_live']:.3f} of all chunks hold a live key)")
        print(f"  relative error median / max: screen {med['screen']:.2e} / {max(errs['screen']):.2e}, "
              f"with the skips {med['skip']:.2e} / {max(errs['skip']):.2e}")


if __name__ == "__main__":
    main()

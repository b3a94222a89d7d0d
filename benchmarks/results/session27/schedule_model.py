"""A model of v1.2's tile schedules (session 27): each tile costs its key blocks + 1 (the +1 a
tile's fixed work), the CTAs (132) are never idle but between tiles, and the makespan is
compared with the ideal (total cost / CTAs). Static: v1.2's boustrophedon (round k, CTA c takes
tile k G + c, or k G + G - 1 - c when k is odd) over the tile order of tile_order.cuh (chunks of
(request, head) pairs, the query-block rank slowest inside a chunk, longest-first when causal;
idle tiles, past a shorter request's end, hold their place in the order and take no time).
Dynamic: list scheduling in the same order (a CTA takes the next tile when it is free).

    python3 benchmarks/results/session27/schedule_model.py
"""
import heapq
import math

G = 132
VARLEN = [256, 4096, 1024, 3000, 512, 2048, 777, 4000, 1408, 300, 2500, 1212, 3333, 640, 2816, 1264]


def tiles(lengths, heads, bm, bn, causal, chunk):
    nq = [math.ceil(n / bm) for n in lengths]
    pairs = [(b, h) for b in range(len(lengths)) for h in range(heads)]
    out = []
    for c0 in range(0, len(pairs), chunk):
        part = pairs[c0:c0 + chunk]
        for y in range(max(nq)):
            for b, _ in part:
                if y >= nq[b]:
                    out.append(0)  # idle tile (past a shorter request's end): takes no time
                    continue
                qb = nq[b] - 1 - y if causal else y
                k_end = min(lengths[b], qb * bm + bm) if causal else lengths[b]
                out.append(math.ceil(k_end / bn) + 1)
    return out


def static(ts):
    load = [0.0] * G
    for i, t in enumerate(ts):
        k, c = divmod(i, G)
        load[c if k % 2 == 0 else G - 1 - c] += t
    return max(load)


def dynamic(ts):
    heap = [0.0] * G
    for t in ts:
        heapq.heappush(heap, heapq.heappop(heap) + t)
    return max(heap)


def row(name, ts):
    ideal = sum(ts) / G
    print(f"{name}: static {static(ts) / ideal:.3f}, dynamic {dynamic(ts) / ideal:.3f}")


for chunk in (4, 8, 16, 33, 64, 128):
    row(f"(8, 2048, 16/16, 128) causal, chunks of {chunk} heads",
        tiles([2048] * 8, 16, 128, 128, True, chunk))
for causal in (False, True):
    row(f"varlen mix, H 32, D 128, {'causal' if causal else 'non-causal'}, one chunk",
        tiles(VARLEN, 32, 128, 128, causal, 16 * 32))

"""GPU: sliding windows and attention sinks in the CUDA decode step, against the CPU reference.

A windowed step (window_before in (0, max_len)) runs the front's WIN forms; the WIN instances of
the dense ring (dense steps) or of split2 (screened steps, where split2 runs), else the plain
split kernel with its window (split_item's WIN); and the EXT combines. Sinks act in the combines
only (decode_combine.cuh). So a windowed step matches the CPU reference as the same step without
a window does: bit for bit where the plain split's fma value product keeps the reference's orders
(v8 caches off the ring and split2) and within one output rounding where the value product runs
on the tensor cores (decode_helpers.tensor_core_path). Verdict
statistics (keys, live, refined, bytes, fix-up rows) are equal in every case. Also: -inf sinks
give the plain step's bits, a request's bits alone = in a ragged batch, CUDA-graph replays =
eager steps, and keys before the window are never read (scrambled, the bits stay). Skipped without a CUDA device or when the library was built without
CUDA; every test runs under a hard time limit.
"""

from __future__ import annotations


import pytest
import torch

import fold_attention as fa
from fold_attention.decode import decode_step_cuda

from decode_helpers import assert_graph_replays, assert_matches_cpu, assert_same_cache, bits16, fill_requests, synth
from decode_helpers import tensor_core_path
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]

TIME_LIMIT_S = 120
CUDA = torch.device("cuda")


def _pair(B, H, Hkv, D, max_len, **kw):
    return (fa.FoldKVCache(B, H, Hkv, D, max_len, device="cpu", **kw),
            fa.FoldKVCache(B, H, Hkv, D, max_len, device=CUDA, **kw))


def _ws(window):
    """fold_attn_with_kvcache's window_size for a window of `window` keys (None: none)."""
    return (-1, -1) if window is None else (window - 1, 0)


def _step(cache, q, k=None, v=None, window=None, sinks=None):
    dev = cache.device
    to = lambda x: None if x is None else x.to(dev)  # noqa: E731
    out, lse = fa.fold_attn_with_kvcache(to(q), cache, to(k), to(v), return_lse=True,
                                         window_size=_ws(window), sinks=to(sinks))
    return out.cpu(), lse.cpu(), cache.stats()


def _kernels(fn):
    """The names of the CUDA kernels fn() launches (torch.profiler), after running it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = fn()
        torch.cuda.synchronize()
    names = {ev.name for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA}
    return out, names


def _exact(cache, window):
    """Whether the CUDA step keeps the reference's orders (bits) or sums N on the tensor cores
    (one output rounding): with or without a window, the same kernels (their WIN instances) take
    the same caches."""
    del window
    return not tensor_core_path(cache.v8, cache.head_dim, cache.depth,
                                cache.n_heads // cache.n_kv_heads)


def _compare(cpu, gpu, q, k=None, v=None, window=None, sinks=None):
    oc, lc, sc = _step(cpu, q, k, v, window, sinks)
    og, lg, sg = _step(gpu, q, k, v, window, sinks)
    assert_matches_cpu(oc, og, lc, lg, exact=_exact(gpu, window))
    assert sc == sg, (sc, sg)
    return og, lg, sg


def _base_sinks(q, k, lengths, G, scale):
    """Per-head logits near the rows' own LSE (sinks that matter), from a float64 estimate."""
    H = q.shape[1]
    s = []
    for b, n in enumerate(lengths):
        if not n:
            continue
        K = k[b, :n].double().repeat_interleave(G, 1)
        s.append(torch.logsumexp(torch.einsum("hd,jhd->hj", q[b].double(), K) * scale, -1))
    return torch.stack(s).mean(0).float() if s else torch.zeros(H)


# Windows across split (512 keys) and page edges, inside the first split, longer than some
# requests, and 1.
WINDOWS = [1, 100, 511, 512, 513, 1000, 1537]
# Requests: long (several splits), a window's length +- 1, inside the first split, one key, free.
LENGTHS = [2600, 1025, 513, 300, 1, None, 512, 64]


@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize("dtype,D,Hkv,G", [
    (torch.bfloat16, 128, 2, 4),
    (torch.float16, 128, 2, 4),
    (torch.bfloat16, 64, 2, 3),
    (torch.float16, 64, 1, 8),
    (torch.bfloat16, 256, 1, 2),
])
@pytest.mark.parametrize("page", [64, 256])
def test_windows_match_cpu(v8, depth, dtype, D, Hkv, G, page):
    B = len(LENGTHS)
    q, k, v = synth(B, Hkv, G, D, 2600, seed=31 + D + G, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 2700, depth=depth, v8=v8, dtype=dtype, page_size=page)
    fill_requests((cpu, gpu), k, v, LENGTHS, chunks=2)
    for window in WINDOWS:
        _compare(cpu, gpu, q, window=window)


@pytest.mark.parametrize("G", [1, 2, 5, 8, 12, 16])
@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize("v8", [False, True])
def test_window_groups_match_cpu(G, depth, v8):
    B, Hkv, D = 3, 2, 128
    lengths = [1800, 700, 40]
    q, k, v = synth(B, Hkv, G, D, 1800, seed=40 + G)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 2048, depth=depth, v8=v8)
    fill_requests((cpu, gpu), k, v, lengths)
    for window in (37, 600, 1300):
        _compare(cpu, gpu, q, window=window)


@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("depth", [None, 16.0])
def test_steps_with_appends_match_cpu(v8, dtype, depth):
    # Steps that append: the window slides over split and page edges (lengths 510..514 with a
    # window of 512 and 1) and the sinks stay.
    B, Hkv, G, D = 2, 2, 4, 64
    q, k, v = synth(B, Hkv, G, D, 520, seed=50, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 600, depth=depth, v8=v8, dtype=dtype, page_size=64)
    fill_requests((cpu, gpu), k, v, [509, 62])
    sinks = _base_sinks(q, k, [509, 62], G, D ** -0.5) + 1.0
    g = torch.Generator().manual_seed(51)
    for i in range(5):
        qs = torch.randn(B, Hkv * G, D, generator=g).to(dtype)
        ks = torch.randn(B, Hkv, D, generator=g).to(dtype)
        vs = torch.randn(B, Hkv, D, generator=g).to(dtype)
        _compare(cpu, gpu, qs, ks, vs, window=512 if i % 2 == 0 else 1, sinks=sinks)
    assert_same_cache(cpu, gpu)


@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize("dtype,D,Hkv,G", [
    (torch.bfloat16, 128, 2, 4),
    (torch.float16, 64, 2, 8),
    (torch.bfloat16, 256, 1, 16),
])
def test_sinks_match_cpu(v8, depth, dtype, D, Hkv, G):
    B = 4
    lengths = [1500, 300, None, 1]
    q, k, v = synth(B, Hkv, G, D, 1500, seed=60 + G, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 1600, depth=depth, v8=v8, dtype=dtype)
    fill_requests((cpu, gpu), k, v, lengths)
    base = _base_sinks(q, k, lengths, G, D ** -0.5)
    g = torch.Generator().manual_seed(61)
    mixed = base + torch.randn(Hkv * G, generator=g) * 3
    mixed[::3] = float("-inf")
    for sinks in (base, base - 30.0, base + 12.0, base + 80.0, mixed):  # dominant up to 80 nats
        for window in (None, 700):
            _compare(cpu, gpu, q, window=window, sinks=sinks)


@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize("window", [None, 200])
def test_minus_inf_sinks_keep_the_bits(v8, depth, window):
    B, Hkv, G, D = 3, 2, 4, 128
    lengths = [900, 33, 600]
    q, k, v = synth(B, Hkv, G, D, 900, seed=70)
    cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 1024, device=CUDA, depth=depth, v8=v8)
    fill_requests((cache,), k, v, lengths)
    o0, l0, s0 = _step(cache, q, window=window)
    o1, l1, s1 = _step(cache, q, window=window, sinks=torch.full((Hkv * G,), float("-inf")))
    assert torch.equal(bits16(o0), bits16(o1))
    assert torch.equal(bits16(l0), bits16(l1))
    assert s0 == s1


@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("depth", [None, 12.0])
def test_window_and_sinks_alone_equal_in_a_batch(v8, depth):
    Hkv, G, D = 2, 4, 128
    lengths = [1700, None, 90, 1025, 512, 3, 1300]
    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, 1700, seed=80)
    batch = fa.FoldKVCache(B, Hkv * G, Hkv, D, 1800, device=CUDA, depth=depth, v8=v8)
    fill_requests((batch,), k, v, lengths)
    sinks = _base_sinks(q, k, lengths, G, D ** -0.5) + torch.linspace(-3.0, 3.0, Hkv * G)
    for window in (100, 700):
        ob, lb, _ = _step(batch, q, window=window, sinks=sinks)
        for b in (0, 2, 3, 4, 6):
            alone = fa.FoldKVCache(1, Hkv * G, Hkv, D, 1800, device=CUDA, depth=depth, v8=v8)
            fill_requests((alone,), k[b : b + 1], v[b : b + 1], [lengths[b]])
            oa, la, _ = _step(alone, q[b : b + 1], window=window, sinks=sinks)
            assert torch.equal(bits16(oa[0]), bits16(ob[b])), (window, b)
            assert torch.equal(bits16(la[0]), bits16(lb[b])), (window, b)


def test_keys_before_the_window_are_never_read():
    # Scrambling the K planes, scales and V of the keys before the window (inf / NaN values in
    # the window's first page included) changes no bit of a windowed step.
    B, Hkv, G, D, L, w = 1, 2, 4, 128, 1400, 700
    q, k, v = synth(B, Hkv, G, D, L, seed=90)
    for depth in (None, 16.0):
        for v8 in (False, True):
            cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 1536, device=CUDA, depth=depth, v8=v8,
                                   page_size=256)
            fill_requests((cache,), k, v, [L])
            before = _step(cache, q, window=w)
            page = cache.page_table[0].tolist()
            P = cache.page_size
            for j in range(L - w):
                p, r = page[j // P], j % P
                cache.k_a[p, :, r] = -cache.k_a[p, :, r]
                cache.k_b[p, :, r] = 7
                cache.k_scale[p, :, r] = 0x7F80  # bf16 +inf
                if v8:
                    cache.v_a[p, :, r] = 0x7F  # E4M3 NaN
                    cache.v_b[p, :, r] = 0x7F
                else:
                    cache.v[p, :, r] = float("nan")
            after = _step(cache, q, window=w)
            assert torch.equal(bits16(before[0]), bits16(after[0])), (depth, v8)
            assert torch.equal(bits16(before[1]), bits16(after[1])), (depth, v8)
            assert before[2] == after[2]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("v8", [False, True])
def test_guard_fixup_over_the_window_matches_cpu(dtype, v8):
    # test_gpu_decode.py's needle (a key 30 binades above the rest that the sample misses) inside
    # the window: the guard recomputes the group over the window's keys [F, L) (its exact LSE, and
    # the fix-up's bytes (L - F)(2D + 2)); with sinks too.
    D, L, Hkv = 64, 1000, 1
    u = torch.zeros(D)
    u[0] = 1.0
    w = torch.zeros(D)
    w[1] = 1.0
    torch.manual_seed(1)
    k = torch.randn(1, L, Hkv, D) * 0.3
    for j in range(100, 900, 90):
        k[0, j, 0] = 40.0 * w
    k[0, 737, 0] = 21.0 * u
    v = torch.randn(1, L, Hkv, D)
    q = ((32.0 if v8 else 8.0) * u).expand(1, 2, D).clone()
    cpu, gpu = _pair(1, 2, Hkv, D, 1024, depth=12.0, dtype=dtype, v8=v8)
    fill_requests((cpu, gpu), k.to(dtype), v.to(dtype), [L])
    flagged = 0
    for window, sinks in ((700, None), (400, None), (700, torch.tensor([5.0, float("-inf")])),
                          (260, torch.tensor([40.0, 0.0]))):
        _, _, sg = _compare(cpu, gpu, q.to(dtype), window=window, sinks=sinks)
        flagged += sg["fixup_rows"]
    print(f"\n{dtype} v8={v8}: fixup rows {flagged}")


def test_cuda_graph_of_a_windowed_step_with_sinks():
    # fold_attn_with_kvcache with a window and sinks captured in a CUDA graph (host checks skipped
    # while capturing; pages reserved up front), and decode_step_cuda's window_size / sinks: the
    # replays append and attend with the eager steps' bits, and the caches end equal.
    Hkv, G, D = 2, 4, 64
    lengths = [520, 1, 300]
    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, 600, seed=100)
    sinks = torch.linspace(-1.0, 2.0, Hkv * G).to(CUDA)

    def public(cache, qs, ks, vs):
        return fa.fold_attn_with_kvcache(qs, cache, ks, vs, return_lse=True, window_size=(99, 0),
                                         sinks=sinks)

    def core(cache, qs, ks, vs):
        out = torch.empty(qs.shape, dtype=torch.bfloat16, device=CUDA)
        lse = torch.empty(qs.shape[:2], dtype=torch.float32, device=CUDA)
        decode_step_cuda(cache, qs, ks, vs, out, lse, window_size=(99, 0), sinks=sinks)
        return out, lse

    for capture in (public, core):
        caches = []
        for _ in range(2):
            c = fa.FoldKVCache(B, Hkv * G, Hkv, D, 640, device=CUDA, depth=16.0)
            for b, n in enumerate(lengths):
                assert c.add_request(length=640) == b
                c.extend(b, k[b, :n].to(CUDA), v[b, :n].to(CUDA))
            caches.append(c)
        eager, graphed = caches
        g = torch.Generator().manual_seed(101)
        steps = 4
        qs = [torch.randn(B, Hkv * G, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
        ks = [torch.randn(B, Hkv, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
        vs = [torch.randn(B, Hkv, D, generator=g).bfloat16().to(CUDA) for _ in range(steps)]
        expected = [public(eager, qs[i], ks[i], vs[i]) for i in range(steps)]
        assert_graph_replays(graphed, capture, qs, ks, vs, expected, capture.__name__)
        assert_same_cache(eager, graphed)


def test_bad_sinks_are_named_on_cuda():
    q, k, v = synth(1, 1, 4, 64, 20, seed=26)
    cache = fa.FoldKVCache(1, 4, 1, 64, max_len=64, depth=16, device=CUDA)
    cache.add_request()
    cache.extend(0, k[0].to(CUDA), v[0].to(CUDA))
    for bad, h in ((float("nan"), 1), (float("inf"), 3)):
        sinks = torch.zeros(4, device=CUDA)
        sinks[h] = bad
        with pytest.raises(ValueError, match=rf"sinks\[{h}\]"):
            fa.fold_attn_with_kvcache(q.to(CUDA), cache, k[:, 0].to(CUDA), v[:, 0].to(CUDA),
                                      sinks=sinks)
        assert cache.lengths.tolist() == [20]  # nothing appended


@pytest.mark.parametrize("blocks", ["1", "3"])
@pytest.mark.parametrize("dtype,D,Hkv,G,v8", [
    (torch.bfloat16, 128, 2, 4, False),
    (torch.float16, 64, 1, 8, False),
    (torch.bfloat16, 64, 2, 3, False),
    (torch.bfloat16, 128, 1, 16, False),
    (torch.bfloat16, 128, 2, 4, True),
    (torch.float16, 64, 2, 3, True),
])
def test_window_ring_schedules_keep_the_bits(dtype, D, Hkv, G, v8, blocks, monkeypatch):
    # Windowed dense steps run the dense ring's WIN instances (v8 caches too; each request's
    # items from its window's first split, that split from F's chunk). Its blocks fetch items
    # (FOLD_DECODE_RING_BLOCKS=N: at most N blocks, each taking items from the window's splits of
    # every request in turn) or take one item each (=0): output, LSE and statistics bit for bit,
    # for every window of WINDOWS, with and without sinks; the read statistics also those of the
    # plain split's windowed step (FOLD_DECODE_RING=0). (The CPU comparisons above check values.)
    B = len(LENGTHS)
    q, k, v = synth(B, Hkv, G, D, 2600, seed=71 + D + G, dtype=dtype)
    cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 2700, depth=None, v8=v8, dtype=dtype, device=CUDA,
                           page_size=64)
    fill_requests((cache,), k, v, LENGTHS, chunks=2)
    sinks = torch.randn(Hkv * G) * 2
    for window in WINDOWS:
        for s in (None, sinks):
            runs = []
            for ring, blk in (("1", "0"), ("1", blocks), ("0", "0")):
                monkeypatch.setenv("FOLD_DECODE_RING", ring)
                monkeypatch.setenv("FOLD_DECODE_RING_BLOCKS", blk)
                cache._workspace.fill_(0xFF)  # (NaN partials: a slot left unwritten shows)
                run, names = _kernels(lambda: _step(cache, q, window=window, sinks=s))
                # (The arm's pass-0 kernel is the one the test means.)
                assert any("decode_split_ring_kernel" in n for n in names) == (ring == "1"), names
                runs.append(run)
            (o0, l0, s0), (o1, l1, s1), (op, _, sp) = runs
            assert torch.equal(bits16(o0), bits16(o1)), (window, blocks)
            assert torch.equal(l0.view(torch.int32), l1.view(torch.int32)), (window, blocks)
            assert s0 == s1 == sp, (s0, s1, sp)
            assert torch.isfinite(op).all() and torch.isfinite(o0).all()


@pytest.mark.parametrize("sa", ["0", "1"])
@pytest.mark.parametrize("dtype,D,Hkv,G,page", [
    (torch.bfloat16, 128, 2, 4, 128),
    (torch.float16, 64, 1, 3, 64),
    (torch.bfloat16, 64, 2, 1, 256),
    (torch.bfloat16, 128, 2, 8, 64),
    (torch.float16, 64, 1, 12, 128),
])
def test_window_split2_same_bits_as_the_plain_split(dtype, D, Hkv, G, page, sa, monkeypatch):
    # Windowed screened steps with bf16 / fp16 V run split2's WIN instances (each split from F's
    # split, that split from F's 64-key half, its keys before F absent). split2 keeps the plain
    # split's arithmetic and orders (test_gpu_decode.py's test_decode_split2_same_bits), so a
    # windowed step gives the plain split's windowed step (FOLD_DECODE_SPLIT2=0) bit for bit:
    # output, LSE and read statistics, for every window of WINDOWS (across split, half and page
    # edges), with and without sinks, plane A in registers or shared memory (SA; G 9-16 always
    # registers), at depths 16 and 8.
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", sa)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_WIDE", "1")
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_G16", "1")
    B = len(LENGTHS)
    q, k, v = synth(B, Hkv, G, D, 2600, seed=83 + D + G, dtype=dtype)
    sinks = torch.randn(Hkv * G) * 2
    for depth in (16.0, 8.0):
        cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 2700, depth=depth, dtype=dtype, device=CUDA, page_size=page)
        fill_requests((cache,), k, v, LENGTHS, chunks=2)
        for window in WINDOWS:
            for s in (None, sinks):
                runs = []
                for on in ("0", "1"):
                    monkeypatch.setenv("FOLD_DECODE_SPLIT2", on)
                    # (The workspace is the cache's, reused by every step: NaN there, so that a
                    # split partial the second arm did not write, or wrote to another slot, is
                    # not the first arm's.)
                    cache._workspace.fill_(0xFF)
                    run, names = _kernels(lambda: _step(cache, q, window=window, sinks=s))
                    # (The arm's pass-0 kernel is the one the test means.)
                    assert any("decode_split2_kernel" in n for n in names) == (on == "1"), names
                    runs.append(run)
                (o0, l0, s0), (o1, l1, s1) = runs
                assert torch.equal(bits16(o0), bits16(o1)), (depth, window)
                assert torch.equal(l0.view(torch.int32), l1.view(torch.int32)), (depth, window)
                assert s0 == s1, (depth, window, s0, s1)

"""GPU: the CUDA decode (cache writer, front, splits, combine, guard) against the CPU reference.

The same cache filled through CPU and CUDA must hold identical bits; decode outputs must
match the reference: bit for bit where the kernels keep the reference's summation order, and
within one output rounding where they do not (caches with bf16 / fp16 V, whose value
product runs on the tensor cores: `decode_helpers.tensor_core_path`), with equal verdict statistics; accuracy vs float64 as the CPU's; bit-identical alone and in a
batch; CUDA-graph capture + replay of append + attend. Skipped without a CUDA device or when
the library was built without CUDA. Every test runs under a hard time limit.
"""

from __future__ import annotations


import pytest
import torch

import fold_attention as fa
from fold_attention.decode import decode_step_cuda

from decode_helpers import assert_graph_replays, default_scale, floor_err, reference, rel_err, synth, tensor_core_path
# (Shared with test_gpu_decode_pages.py; kept under this file's original names.)
from decode_helpers import assert_matches_cpu as _assert_matches
from decode_helpers import assert_same_cache as _assert_same_cache
from decode_helpers import bits16 as _bits
from decode_helpers import fill_requests as _fill
from decode_helpers import step_outputs as _step
from helpers import gpu_ready

_READY, _WHY = gpu_ready()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _READY, reason=_WHY)]

TIME_LIMIT_S = 60


CUDA = torch.device("cuda")


def _make(device, B, H, Hkv, D, max_len, **kw):
    return fa.FoldKVCache(B, H, Hkv, D, max_len, device=device, **kw)


def _pair(B, H, Hkv, D, max_len, **kw):
    return _make("cpu", B, H, Hkv, D, max_len, **kw), _make(CUDA, B, H, Hkv, D, max_len, **kw)


def _cache_tensor_core_path(cache):
    return tensor_core_path(cache.v8, cache.head_dim, cache.depth, cache.n_heads // cache.n_kv_heads)


def _compare_step(cpu, gpu, q, k=None, v=None, exact_stats=True):
    oc, lc, sc = _step(cpu, q, k, v)
    og, lg, sg = _step(gpu, q, k, v)
    if _cache_tensor_core_path(gpu):
        _assert_matches(oc, og, lc, lg, exact=False)
        if exact_stats:
            assert sc == sg, (sc, sg)
        return oc, og, lc, lg, sc, sg
    norm = oc.float().norm().item()
    diff = (og.float() - oc.float()).abs().max().item()
    assert diff <= 1e-5 * max(norm, 1e-30), (diff, norm)
    fin = torch.isfinite(lc)
    assert torch.equal(fin, torch.isfinite(lg))
    assert torch.equal(lc[~fin], lg[~fin])
    if fin.any():
        assert (lg[fin].double() - lc[fin].double()).abs().max().item() <= 1e-5
    if exact_stats:
        assert sc == sg, (sc, sg)
    return oc, og, lc, lg, sc, sg


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("v8", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_cache_planes_bitwise(dtype, v8, D):
    torch.manual_seed(0)
    B, Hkv, G, page = 3, 2, 4, 64
    lengths = [150, None, 77]
    k = torch.randn(B, 200, Hkv, D).to(dtype) * 3
    v = torch.randn(B, 200, Hkv, D).to(dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 220, v8=v8, page_size=page, dtype=dtype)
    _fill((cpu, gpu), k, v, lengths, chunks=3)
    _assert_same_cache(cpu, gpu)
    # Larger values: a v8 request's exponent grows and its stored planes are re-quantised.
    big = (torch.randn(1, 5, Hkv, D) * 200).to(dtype)
    for c in (cpu, gpu):
        c.extend(0, big[0].to(c.device), big[0].to(c.device))
    _assert_same_cache(cpu, gpu)
    q = torch.randn(B, Hkv * G, D).to(dtype)
    ks = torch.randn(B, Hkv, D).to(dtype)
    vs = (torch.randn(B, Hkv, D) * 1000).to(dtype)
    _compare_step(cpu, gpu, q, ks, vs)
    _assert_same_cache(cpu, gpu)


CONFIGS = [
    # (dtype, D, Hkv, G, depth, v8)
    (torch.bfloat16, 128, 2, 4, 16.0, False),
    (torch.bfloat16, 128, 2, 4, 12.0, False),
    (torch.bfloat16, 128, 2, 4, None, False),
    (torch.bfloat16, 128, 2, 4, 16.0, True),
    (torch.bfloat16, 128, 2, 4, None, True),
    (torch.float16, 128, 2, 4, 16.0, False),
    (torch.float16, 64, 1, 8, 12.0, True),
    (torch.bfloat16, 256, 1, 2, 16.0, False),
    (torch.bfloat16, 64, 2, 1, 16.0, False),
    (torch.bfloat16, 128, 1, 64, 16.0, False),
    (torch.bfloat16, 256, 1, 64, 12.0, True),
    # Group sizes of every value-product slice count (decode_plan.h pv_slices: G <= 4: 8,
    # <= 8: 4, <= 16: 2) with partial row blocks.
    (torch.bfloat16, 128, 2, 12, None, False),
    (torch.float16, 128, 1, 6, 16.0, False),
    (torch.bfloat16, 64, 2, 3, None, True),
    # The v8 dense ring's other row-block instances (G 9-16: two; G 40: eight) and fp16 queries.
    (torch.float16, 128, 1, 12, None, True),
    (torch.bfloat16, 128, 1, 40, None, True),
    (torch.bfloat16, 64, 1, 12, None, True),
    # One slice with partial row blocks (G 20: 3 blocks; G 40: 5).
    (torch.bfloat16, 64, 1, 20, 16.0, False),
    (torch.bfloat16, 128, 1, 40, None, False),
    # The largest shared-memory layout of the tensor-core split (D 256, G 64; pass 1's list
    # kernel adds the combine's and fix-up's static shared memory): it must fit the block limit.
    (torch.bfloat16, 256, 1, 64, 16.0, False),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{str(c[0])[6:]}-D{c[1]}-{c[2]}x{c[3]}-depth{c[4]}-v8{c[5]}")
def test_decode_matches_cpu_ragged(cfg):
    dtype, D, Hkv, G, depth, v8 = cfg
    lengths = [0, 1, 63, None, 513, 1300, 64, 2049]
    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=3, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 2100, depth=depth, v8=v8, page_size=128, dtype=dtype)
    _fill((cpu, gpu), k, v, lengths, chunks=2)
    _assert_same_cache(cpu, gpu)
    oc, og, *_ = _compare_step(cpu, gpu, q)
    print(f"\n{cfg}: bit-identical output: {torch.equal(_bits(oc), _bits(og))}")
    # Two steps with an append.
    for _ in range(2):
        ks, vs = torch.randn(B, Hkv, D).to(dtype), torch.randn(B, Hkv, D).to(dtype)
        _compare_step(cpu, gpu, q, ks, vs)
    _assert_same_cache(cpu, gpu)


RAGGED = [0, 1, 63, None, 513, 1300, 64, 2049]  # empty, 1, partial chunks and splits, free


def _ragged_step_matches_cpu(dtype, D, Hkv, G, seed, max_len=2100, **cache_kw):
    """A CPU / CUDA cache pair filled with RAGGED lengths; one step's output, LSE and read
    statistics bit for bit (within one rounding on the tensor-core path). Returns the pair
    and the step's q for more steps."""
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=seed, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, max_len, page_size=128, dtype=dtype, **cache_kw)
    _fill((cpu, gpu), k, v, RAGGED, chunks=2)
    oc, lc, sc = _step(cpu, q)
    og, lg, sg = _step(gpu, q)
    exact = not tensor_core_path(cache_kw.get("v8", False), D, cache_kw.get("depth"), G)
    _assert_matches(oc, og, lc, lg, exact)
    assert sc == sg, (sc, sg)
    return cpu, gpu, q


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{str(c[0])[6:]}-D{c[1]}-{c[2]}x{c[3]}-depth{c[4]}-v8{c[5]}")
def test_decode_matches_cpu_ragged_lengths(cfg):
    # The CUDA front, split and combine against the CPU reference: outputs and LSE (bit for bit
    # for v8 caches off the dense ring, else within one rounding: tensor_core_path) and read
    # statistics bit for bit, on ragged lengths (empty, 1, partial chunks and splits).
    dtype, D, Hkv, G, depth, v8 = cfg
    _ragged_step_matches_cpu(dtype, D, Hkv, G, 5, depth=depth, v8=v8)


@pytest.mark.parametrize(
    "dtype,D,Hkv,G", [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 2, 8), (torch.bfloat16, 128, 1, 20)]
)
@pytest.mark.parametrize("ring", ["1", "0"])
def test_decode_ring_matches_cpu(dtype, D, Hkv, G, ring, monkeypatch):
    # The dense split at D 64 / 128 runs through the bulk-copy ring by default; FOLD_DECODE_RING=0
    # selects the plain split kernel. Both match the CPU reference within one rounding (their
    # value products run on the tensor cores), on ragged lengths (partial chunks and splits,
    # empty requests).
    monkeypatch.setenv("FOLD_DECODE_RING", ring)
    _ragged_step_matches_cpu(dtype, D, Hkv, G, 6, depth=None)


# 70 requests (three rounds of the fetching blocks' 32-request scan), empty, free and short ones
# on both sides of requests 31 / 32 and 63 / 64.
MANY = [RAGGED[i % len(RAGGED)] if i not in (31, 32, 63, 64) else [None, 0, 700, None][
    (31, 32, 63, 64).index(i)] for i in range(70)]


def _ring_runs_same_bits(dtype, D, Hkv, G, lengths, seed, set_arm, monkeypatch, depth=None,
                         max_len=2200, v8=False):
    """The dense ring (or, with a depth, the screened split) on two equal caches, an attend then
    a step that appends on each, with set_arm(0) / set_arm(1) called before each cache's steps
    (the settings compared): output, LSE and read statistics bit for bit."""
    monkeypatch.setenv("FOLD_DECODE_RING", "1")
    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, max_len - 100, seed=seed, dtype=dtype)
    ks, vs = torch.randn(B, Hkv, D).to(dtype), torch.randn(B, Hkv, D).to(dtype)
    caches = [_make(CUDA, B, Hkv * G, Hkv, D, max_len, page_size=128, dtype=dtype, depth=depth, v8=v8)
              for _ in range(2)]
    _fill(caches, k, v, lengths, chunks=2)
    runs = []
    for arm, cache in enumerate(caches):
        set_arm(arm)
        runs.append((_step(cache, q), _step(cache, q, ks, vs)))
    for (o0, l0, s0), (o1, l1, s1) in zip(*runs):  # the attend, then the step that appends
        assert torch.equal(o0.view(torch.int16), o1.view(torch.int16))
        assert torch.equal(l0.view(torch.int32), l1.view(torch.int32))
        assert s0 == s1, (s0, s1)


@pytest.mark.parametrize("blocks", ["1", "3", "7"])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G,lengths",
    [(torch.bfloat16, 128, 2, 4, RAGGED), (torch.float16, 64, 3, 3, RAGGED),
     (torch.bfloat16, 128, 1, 20, RAGGED), (torch.float16, 128, 2, 8, RAGGED),
     (torch.bfloat16, 64, 1, 4, MANY)],
    ids=["bf16-D128-G4", "f16-D64-G3", "bf16-D128-G20", "f16-D128-G8", "bf16-D64-G4-B70"],
)
def test_decode_ring_blocks_same_bits(dtype, D, Hkv, G, lengths, blocks, monkeypatch):
    # The dense ring's blocks fetch items (split, KV head, request) from a counter where the
    # grid is large (as many blocks as are resident), FOLD_DECODE_RING_BLOCKS=N at most N (here
    # 1, 3, 7: many items per block, ragged, empty requests and partial chunks between them, the
    # ring's stages and rounds carried from one item to the next), =0 one block per item.
    # Scheduling only: output, LSE and read statistics bit for bit as one block per item, for an
    # attend and for a step that appends (and for the second step, the counter reset by the
    # front).
    _ring_runs_same_bits(dtype, D, Hkv, G, lengths, 17, lambda arm: monkeypatch.setenv(
        "FOLD_DECODE_RING_BLOCKS", ["0", blocks][arm]), monkeypatch)


@pytest.mark.parametrize("form", ["1s", "2s", "4s", "8", "8s", "8su", "2su"])
@pytest.mark.parametrize("depth", [None, 16.0], ids=["dense", "depth16"])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G,lengths",
    [(torch.bfloat16, 128, 2, 16, RAGGED), (torch.float16, 64, 3, 3, RAGGED),
     (torch.bfloat16, 128, 1, 8, RAGGED)],
    ids=["bf16-D128-G16", "f16-D64-G3", "bf16-D128-G8"],
)
def test_decode_front_form_same_bits(dtype, D, Hkv, G, lengths, depth, form, monkeypatch):
    # The front's rows per block, its SMALL instance and its UNROLL form
    # (FOLD_DECODE_FRONT_FORM) are scheduling only: every row's q planes, Z and coarse error are
    # the same whichever block computes them, so output, LSE and read statistics are bit for bit
    # the default's, dense and screened, for an attend and a step that appends.
    def set_arm(arm):
        if arm == 0:
            monkeypatch.delenv("FOLD_DECODE_FRONT_FORM", raising=False)
        else:
            monkeypatch.setenv("FOLD_DECODE_FRONT_FORM", form)

    _ring_runs_same_bits(dtype, D, Hkv, G, lengths, 29, set_arm, monkeypatch, depth=depth)


@pytest.mark.parametrize("form", ["FOLD_DECODE_FRONT_HALF", "FOLD_DECODE_FRONT_U2"], ids=["half", "u2"])
@pytest.mark.parametrize("depth", [None, 16.0], ids=["dense", "depth16"])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G",
    [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 4, 3), (torch.bfloat16, 128, 2, 1)],
    ids=["bf16-D128-G4", "f16-D64-G3", "bf16-D128-G1"],
)
def test_decode_front_large_forms_same_bits(dtype, D, Hkv, G, depth, form, monkeypatch):
    # Where the groups alone fill the GPU, the front has two more forms than its plain 256-thread
    # blocks (4 per SM): HALF, 128-thread blocks with 64 sample slots per warp (8 per SM), and U2,
    # every tile's key loads issued together (2 per SM); the launcher picks them by grid size,
    # here each is forced on ("1") against both off ("0"). Scheduling only: every row's q
    # planes, Z and coarse error are the same, so output, LSE and read statistics are bit for bit
    # the plain form's, for an attend and a step that appends (70 requests: empty, free and
    # short ones among them).
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if len(MANY) * Hkv < sms:
        pytest.skip(f"{len(MANY) * Hkv} groups do not exceed this GPU's {sms} SMs")

    def set_arm(arm):
        for knob in ("FOLD_DECODE_FRONT_HALF", "FOLD_DECODE_FRONT_U2"):
            monkeypatch.setenv(knob, "1" if arm == 1 and knob == form else "0")

    _ring_runs_same_bits(dtype, D, Hkv, G, MANY, 37, set_arm, monkeypatch, depth=depth)


@pytest.mark.parametrize("depth", [None, 16.0], ids=["dense", "depth16"])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G",
    [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 2, 8), (torch.bfloat16, 128, 1, 12),
     (torch.bfloat16, 128, 2, 5), (torch.float16, 128, 2, 3)],
    ids=["bf16-D128-G4", "f16-D64-G8", "bf16-D128-G12", "bf16-D128-G5", "f16-D128-G3"],
)
def test_decode_combine_ept_same_bits(dtype, D, Hkv, G, depth, monkeypatch):
    # The combine at two elements per thread (FOLD_DECODE_COMBINE_EPT=2: half the blocks; the
    # launcher picks it where the grid of one would take more than a wave) against one: every
    # sum runs over the splits in split order either way, so output, LSE and read statistics are
    # bit for bit the same (G 12 at D 128: three blocks of four rows against six of two; G 5: a
    # last block of one row; G 3: one block of three rows, fewer elements than threads).
    def set_arm(arm):
        monkeypatch.setenv("FOLD_DECODE_COMBINE_EPT", ["1", "2"][arm])

    _ring_runs_same_bits(dtype, D, Hkv, G, MANY, 41, set_arm, monkeypatch, depth=depth)


@pytest.mark.parametrize("batch", ["8", "16"])
@pytest.mark.parametrize("depth", [None, 16.0], ids=["dense", "depth16"])
@pytest.mark.parametrize("dtype,D,Hkv,G", [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 1, 16)],
                         ids=["bf16-D128-G4", "f16-D64-G16"])
def test_decode_combine_batch_same_bits(dtype, D, Hkv, G, depth, batch, monkeypatch):
    # The combine stages the splits' partials in batches sized by its launch's shared memory
    # (FOLD_DECODE_COMBINE_BATCH caps it; 18 splits here, so 3 or 2 batches against 1): every
    # sum still runs over the splits in split order, so output, LSE and statistics are the
    # default's bits.
    def set_arm(arm):
        if arm == 0:
            monkeypatch.delenv("FOLD_DECODE_COMBINE_BATCH", raising=False)
        else:
            monkeypatch.setenv("FOLD_DECODE_COMBINE_BATCH", batch)

    _ring_runs_same_bits(dtype, D, Hkv, G, [9000, 4700, 513, 1], 31, set_arm, monkeypatch,
                         depth=depth, max_len=9200)


@pytest.mark.parametrize("sa", ["-", "1"])
@pytest.mark.parametrize("D,Hkv,G", [(128, 2, 4), (64, 3, 3), (128, 1, 8), (64, 1, 12)])
def test_v8_split2_matches_fma_split(D, Hkv, G, sa, monkeypatch):
    # v8's screened split2 (the value product on the tensor cores) against split_item's fma
    # product (FOLD_DECODE_V8_SPLIT2=0, the CPU reference's bits): the same weights and verdicts,
    # so equal statistics, and outputs within one fp16 rounding that differ in few elements.
    # refine_band 0 puts plane B of V in reach of keys within 2 binades of Z only, so most live
    # keys read plane A alone: a plane B gathered or left stale where it should be zero (or
    # dropped where it should be read) moves most outputs by more than a rounding. sa "1": the
    # forms with plane A of K in shared memory (FOLD_DECODE_SPLIT2_SA; G 9-16 has none).
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    if sa != "-":
        monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", sa)
    B, L = 3, 2600
    q, k, v = synth(B, Hkv, G, D, L, seed=11, dtype=torch.float16)
    cache = _make(CUDA, B, Hkv * G, Hkv, D, L, depth=16.0, refine_band=0.0, v8=True,
                  dtype=torch.float16)
    _fill((cache,), k, v, [L, 1300, 517])
    outs = []
    for arm in ("0", "1"):
        monkeypatch.setenv("FOLD_DECODE_V8_SPLIT2", arm)
        outs.append(_step(cache, q))
    (of, lf, sf), (ot, lt, st) = outs
    assert sf == st, (sf, st)
    assert sf["live_frac"] - sf["v_refine_frac"] > 0.1, sf
    # (The LSE within 1e-5: split2 sums T_lse over trees of each half's keys, split_item's v8
    # path in key order.)
    _assert_matches(of, ot, lf, lt, exact=False)
    n_diff = int((_bits(of) != _bits(ot)).sum())
    assert n_diff <= of.numel() // 20, (n_diff, of.numel())


@pytest.mark.parametrize("knob,value", [("FOLD_DECODE_RING_STAGES", "2"), ("FOLD_DECODE_RING_STAGES", "4"),
                                         ("FOLD_DECODE_RING_FULL", "0"), ("FOLD_DECODE_L2PROMO", "256"),
                                         ("FOLD_DECODE_L2PROMO", "0"), ("FOLD_DECODE_FRONT_UNROLL", "0")])
@pytest.mark.parametrize("blocks", ["0", "3"])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G,lengths,v8",
    [(torch.bfloat16, 128, 2, 4, RAGGED, False), (torch.float16, 64, 3, 3, RAGGED, False),
     (torch.float16, 128, 1, 8, RAGGED, False), (torch.bfloat16, 64, 1, 4, MANY, False),
     (torch.bfloat16, 128, 2, 4, RAGGED, True), (torch.float16, 64, 3, 3, RAGGED, True)],
    ids=["bf16-D128-G4", "f16-D64-G3", "f16-D128-G8", "bf16-D64-G4-B70", "v8-bf16-D128-G4", "v8-f16-D64-G3"],
)
def test_decode_ring_schedule_same_bits(dtype, D, Hkv, G, lengths, v8, blocks, knob, value, monkeypatch):
    # The ring's stage count (FOLD_DECODE_RING_STAGES = 2 / 4 at G <= 8; by default 4 at D 64, 2
    # at D 128), its whole-chunk form (FOLD_DECODE_RING_FULL=0 runs every chunk through the
    # general one), its maps' L2 promotion (FOLD_DECODE_L2PROMO; default 128 bytes) and the
    # front's unrolled form at small grids (FOLD_DECODE_FRONT_UNROLL=0: the loop) change no
    # value: output, LSE and read statistics bit for bit as the default,
    # with one block per item and with fetching blocks (stages and rounds carried over items),
    # for an attend and a step.
    monkeypatch.setenv("FOLD_DECODE_RING_BLOCKS", blocks)

    def set_arm(arm):
        if arm == 0:
            monkeypatch.delenv(knob, raising=False)
        else:
            monkeypatch.setenv(knob, value)

    _ring_runs_same_bits(dtype, D, Hkv, G, lengths, 23, set_arm, monkeypatch, v8=v8)


@pytest.mark.parametrize("blocks", ["-", "3"])
@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize(
    "dtype,D,Hkv,G,v8",
    [(torch.bfloat16, 128, 2, 4, False), (torch.float16, 64, 3, 3, False), (torch.bfloat16, 128, 1, 16, False),
     (torch.bfloat16, 128, 2, 4, True), (torch.float16, 64, 3, 3, True)],
    ids=["bf16-D128-G4", "f16-D64-G3", "bf16-D128-G16", "v8-bf16-D128-G4", "v8-f16-D64-G3"],
)
def test_decode_overlap_same_bits(dtype, D, Hkv, G, v8, depth, blocks, monkeypatch):
    # The dense ring and split2 start beside the front (the default; FOLD_DECODE_OVERLAP=0: the
    # front triggers them at its end): they read the lengths (the append's new ones when the step
    # appends), the page table and the cache before their wait, the front's output after it.
    # Scheduling only: output, LSE and read statistics bit for bit with and without, for an
    # attend and two steps that append, each step with other query rows (so that q planes, sq
    # and Z read too early would differ), on ragged lengths with empty and free requests; depth
    # 16 runs split2 at G 3 / 4 and the dense ring at G 16 (the planner's choice there);
    # blocks "3": the ring's blocks fetch items from the counter (several items per block).
    # v8 (the dense ring reads the planes before its wait): the second append's values are 300x,
    # so the requests' V exponents grow and their stored planes are re-quantised by the append.
    monkeypatch.setenv("FOLD_DECODE_PDL", "1")
    if blocks != "-":
        monkeypatch.setenv("FOLD_DECODE_RING_BLOCKS", blocks)
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=29, dtype=dtype)
    qs = [q, q.roll(1, dims=1), q.roll(2, dims=1)]
    steps = [(torch.randn(B, Hkv, D).to(dtype), (torch.randn(B, Hkv, D) * (300.0 if v8 and i else 1.0)).to(dtype))
             for i in range(2)]
    caches = [_make(CUDA, B, Hkv * G, Hkv, D, 2200, page_size=128, dtype=dtype, depth=depth, v8=v8)
              for _ in range(2)]
    _fill(caches, k, v, RAGGED, chunks=2)
    runs = []
    for arm, cache in enumerate(caches):
        monkeypatch.setenv("FOLD_DECODE_OVERLAP", "10"[arm])
        appends = [_step(cache, qi, ks, vs) for qi, (ks, vs) in zip(qs[1:], steps)]
        runs.append([_step(cache, qs[0])] + appends)
    for (o0, l0, s0), (o1, l1, s1) in zip(*runs):
        assert torch.equal(o0.view(torch.int16), o1.view(torch.int16))
        assert torch.equal(l0.view(torch.int32), l1.view(torch.int32))
        assert s0 == s1, (s0, s1)


def _two_arms_same_bits(monkeypatch, knob, ran, dtype, D, Hkv, G, seed, window=False, lengths=RAGGED,
                        **cache_kw):
    # A scheduling switch's two arms (knob "1" / "0", read per call) on two caches filled alike
    # (ragged `lengths` with empty and free requests): an attend under the profiler (ran(names,
    # value) checks the kernels the arm ran), two steps that append, and with `window` a windowed
    # attend; output, LSE and read statistics bit for bit between the arms.
    from torch.profiler import ProfilerActivity, profile

    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=seed, dtype=dtype)
    steps = [(torch.randn(B, Hkv, D).to(dtype), torch.randn(B, Hkv, D).to(dtype)) for _ in range(2)]
    caches = [_make(CUDA, B, Hkv * G, Hkv, D, 2200, dtype=dtype, **cache_kw) for _ in range(2)]
    _fill(caches, k, v, lengths, chunks=2)
    runs = []
    for value, cache in zip("10", caches):
        monkeypatch.setenv(knob, value)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run = [_step(cache, q)]
            torch.cuda.synchronize()
        ran({ev.name for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA}, value)
        run += [_step(cache, q.roll(i + 1, dims=1), ks, vs) for i, (ks, vs) in enumerate(steps)]
        if window:
            out, lse = fa.fold_attn_with_kvcache(q.to(CUDA), cache, return_lse=True, window_size=(699, 0))
            run.append((out.cpu(), lse.cpu(), cache.stats()))
        runs.append(run)
    for (o0, l0, s0), (o1, l1, s1) in zip(*runs):
        assert torch.equal(o0.view(torch.int16), o1.view(torch.int16))
        assert torch.equal(l0.view(torch.int32), l1.view(torch.int32))
        assert s0 == s1, (s0, s1)


# The scheduling bit tests' caches: narrow G 3 / 4, wide G 6, two row blocks G 16, v8's planes.
SCHED_CASES = pytest.mark.parametrize(
    "dtype,D,Hkv,G,v8",
    [(torch.bfloat16, 128, 2, 4, False), (torch.float16, 64, 3, 3, False), (torch.bfloat16, 128, 1, 16, False),
     (torch.bfloat16, 64, 2, 6, False), (torch.bfloat16, 128, 2, 4, True), (torch.float16, 64, 3, 3, True)],
    ids=["bf16-D128-G4", "f16-D64-G3", "bf16-D128-G16", "bf16-D64-G6", "v8-bf16-D128-G4", "v8-f16-D64-G3"],
)


@pytest.mark.parametrize("sched", ["-", "fetch+sa"])
@pytest.mark.parametrize("depth", [None, 16.0])
@SCHED_CASES
def test_decode_l2_prefetch_same_bits(dtype, D, Hkv, G, v8, depth, sched, monkeypatch):
    # A small grid's dense ring and split2 ask L2 for their split's rows at its start
    # (FOLD_DECODE_L2PF=1; off by default, the grids here of at most one block per SM as it is
    # meant for). A hint only: output, LSE and read statistics bit for bit with and without, for
    # an attend, two steps that append (their new rows among those asked for) and a windowed
    # attend (the first split's item starts at the window's chunk), on ragged lengths with empty
    # and free requests. depth None runs the dense ring, depth 16 split2 (the screen kept at every
    # G: FOLD_DECODE_SCREEN=1): narrow at G 3 / 4, wide at G 6, two row blocks at G 16, v8's;
    # "fetch+sa": the ring's fetching blocks (each item asked for when taken) and split2's plane A
    # in shared memory. The profiler checks that each arm ran the kernel it means.
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    if sched != "-":
        monkeypatch.setenv("FOLD_DECODE_RING_BLOCKS", "3")
        monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", "1")
    kernel = "decode_split_ring_kernel" if depth is None else "decode_split2_kernel"

    def ran(names, value):
        assert any(kernel in n for n in names), sorted(names)

    _two_arms_same_bits(monkeypatch, "FOLD_DECODE_L2PF", ran, dtype, D, Hkv, G, seed=37, window=True,
                        page_size=128, depth=depth, v8=v8)


@pytest.mark.parametrize("page", [64, 128])
@pytest.mark.parametrize("depth", [16.0, 8.0])
@SCHED_CASES
def test_decode_split2_pipe_same_bits(dtype, D, Hkv, G, v8, depth, page, monkeypatch):
    # PIPE (decode_split2.cuh; the default where split2's grid is at most one block per SM, as
    # here, with PAIR off; FOLD_DECODE_SPLIT2_PIPE=1 / 0 forces it): the next 128-key step's screen and gathers
    # issued before a step's value product, into a second stage and flag buffer. Only the order of
    # issue changes: output, LSE and read statistics bit for bit with and without, for an attend
    # and two steps that append, on ragged lengths (splits of one to four steps, so both buffers
    # and odd step counts; partial halves; empty and free requests), pages of 64 keys (a page
    # boundary between a step's halves) and 128, depth 8 (more refined keys) and 16; narrow at
    # G 3 / 4, wide at G 6, two row blocks at G 16, v8's planes. The screen is kept at every G
    # (FOLD_DECODE_SCREEN=1) and plane A stays in registers (SA off: PIPE's form). The profiler
    # checks the instance each arm ran (the kernel's ninth template argument is PIPE).
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", "0")
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_PAIR", "0")  # (explicit: PAIR's default needs PIPE's)
    _two_arms_same_bits(monkeypatch, "FOLD_DECODE_SPLIT2_PIPE", _split2_arg_is(8), dtype, D, Hkv, G,
                        seed=41, page_size=page, depth=depth, v8=v8)


def _split2_arg_is(index):
    # ran(names, value) for _two_arms_same_bits: every split2 instance that ran has template
    # argument `index` true in arm "1" and false in arm "0" (decode_split2_kernel<F16, NP, MINB,
    # SA, WIDE, RB, V8, WIN, PIPE, PAIR>).
    import re

    def ran(names, value):
        args = [m.group(1).split(",")[index].strip() for n in names
                for m in [re.search(r"decode_split2_kernel<([^>]*)>", n)] if m]
        assert args and set(args) == {"true" if value == "1" else "false"}, args

    return ran


# PAIR's step counts: a split's last step partial in either group (half 1 absent or partial),
# splits of two steps (lengths 150, 200, 700 and split 2 of 1400) and of four with group 1's step
# partial (split 1 of 1000), beside an empty and a free request.
PAIR_LENGTHS = [150, 0, 200, None, 700, 1000, 1400, 2049]


@pytest.mark.parametrize("lengths", [RAGGED, PAIR_LENGTHS], ids=["ragged", "partial-steps"])
@pytest.mark.parametrize("page", [64, 128])
@pytest.mark.parametrize("depth", [16.0, 8.0])
@SCHED_CASES
def test_decode_split2_pair_same_bits(dtype, D, Hkv, G, v8, depth, page, lengths, monkeypatch):
    # PAIR (decode_split2.cuh; the default where split2's grid is at most one block per SM, as
    # here; FOLD_DECODE_SPLIT2_PAIR=1 / 0 forces it on / off): blocks of two warp groups,
    # one screening, gathering and weighing the even 128-key steps, the other the odd ones, at
    # once, each into its own stage, flags, coarse logits, sums and weight operands; the first
    # group then flushes, sums and multiplies both steps in key order. Against the form without it
    # (PIPE where the grid is at most one block per SM, as on an H100 or H200 here): output, LSE and
    # read statistics bit for bit, for an attend and two steps that append on RAGGED lengths
    # (splits of one, three and four steps: odd counts leave the second group without a step) and
    # on PAIR_LENGTHS (partial steps in either group, splits of two steps), pages of 64 and 128,
    # depth 8 and 16, narrow G 3 / 4, wide G 6, two row blocks G 16, v8. The profiler checks the
    # instance (tenth argument: PAIR).
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    _two_arms_same_bits(monkeypatch, "FOLD_DECODE_SPLIT2_PAIR", _split2_arg_is(9), dtype, D, Hkv, G,
                        seed=43, lengths=lengths, page_size=page, depth=depth, v8=v8)


# Hand-made heavy lists for the front's sample (decode_front.cuh front_shape / front_place_slots
# against the CPU reference's serial plan_reference_sample): with L the request's length and the
# newest keys [L - 63, L), entries that are empty (-1), key 0, in the newest range or past L
# (never middle), duplicates (counted once among the exact middle keys), consecutive keys (a
# stratum sample moves past every one of them) and keys at stratum positions.
def _heavy_lists(L):
    lo = max(L - 63, 1)
    mid = [j for j in (1, 2, 3, lo // 2, lo // 2 + 1, lo - 1) if 1 <= j < lo]
    m = lo - 1
    strata = [1 + (2 * i + 1) * m // 256 for i in (0, 5, 127)] if m > 128 else []
    return [
        [-1] * 8,
        (mid + [0, L, L + 7, lo] + [-1] * 8)[:8],
        ((mid[:2] * 3) + [-1] * 8)[:8] if mid else [-1] * 8,
        (strata + [s + 1 for s in strata] + mid + [-1] * 8)[:8],
        ([L - 1, lo, 0] + mid[::-1] + [-1] * 8)[:8],
    ]


@pytest.mark.parametrize("L", [1, 40, 64, 65, 100, 191, 192, 193, 194, 700, 3000])
def test_decode_front_sample_heavy_lists_match_cpu(L, monkeypatch):
    # The front's sample shape from every warp's registers (front_shape) against the CPU
    # reference's plan, on hand-made heavy lists (_heavy_lists) written into both caches: every
    # slot's key enters Z, so the bits of the output and LSE and the read statistics must be the
    # CPU's. The exact value path (a v8 cache on split_item's fma product: FOLD_DECODE_V8_SPLIT2=0,
    # the screen kept and the rings off) so that any other Z shows in the bits. L around the
    # exact middle keys' end (m = L - 64 <= 128) and the strata, B 5: one request per list.
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    monkeypatch.setenv("FOLD_DECODE_V8_SPLIT2", "0")
    monkeypatch.setenv("FOLD_DECODE_RING", "0")
    lists = _heavy_lists(L)
    B, Hkv, G, D = len(lists), 2, 3, 64
    q, k, v = synth(B, Hkv, G, D, L, seed=53 + L, dtype=torch.float16)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 3072, page_size=64, dtype=torch.float16, depth=16.0, v8=True)
    _fill((cpu, gpu), k, v, [L] * B)
    for b, hl in enumerate(lists):
        for hk in range(Hkv):
            row = torch.tensor(hl[hk:] + hl[:hk], dtype=torch.int32)  # (a different order per head)
            cpu.heavy_keys[b, hk].copy_(row)
            gpu.heavy_keys[b, hk].copy_(row.to(CUDA))
    assert not _cache_tensor_core_path(gpu)
    oc, lc, sc = _step(cpu, q)
    og, lg, sg = _step(gpu, q)
    _assert_matches(oc, og, lc, lg, exact=True)
    assert sc == sg, (sc, sg)


@pytest.mark.parametrize("depth", [None, 16.0])
@pytest.mark.parametrize("dtype,D,Hkv,G", [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 3, 3)],
                         ids=["bf16-D128-G4", "f16-D64-G3"])
def test_decode_all_requests_empty_matches_cpu(dtype, D, Hkv, G, depth):
    # Every request empty or free: no split block has keys (split2's blocks then only wait for
    # the front and return, so that the kernels after them still follow the front's resets).
    # Repeated attends: the CPU's output, LSE and read statistics each time (the statistics are
    # reset by the front and summed by pass 1, after the front).
    lengths = [0, None, 0, None]
    B = len(lengths)
    q, k, v = synth(B, Hkv, G, D, 64, seed=31, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 1100, page_size=128, dtype=dtype, depth=depth)
    _fill((cpu, gpu), k, v, lengths)
    oc, lc, sc = _step(cpu, q)
    for _ in range(3):
        og, lg, sg = _step(gpu, q)
        _assert_matches(oc, og, lc, lg, exact=False)
        assert sc == sg, (sc, sg)


def test_decode_l2_promotion_setting_is_checked(monkeypatch):
    # FOLD_DECODE_L2PROMO takes 0, 64, 128 or 256: anything else is refused with a message that
    # names it (never read as some granule), and the cache still attends afterwards.
    monkeypatch.setenv("FOLD_DECODE_RING", "1")
    q, k, v = synth(2, 2, 4, 128, 300, seed=5, dtype=torch.bfloat16)
    cache = _make(CUDA, 2, 8, 2, 128, 400, page_size=128, dtype=torch.bfloat16, depth=None)
    _fill([cache], k, v, [300, 77], chunks=1)
    expect = _step(cache, q)
    for bad in ("7", "x", "128b"):
        monkeypatch.setenv("FOLD_DECODE_L2PROMO", bad)
        with pytest.raises(ValueError, match="FOLD_DECODE_L2PROMO"):
            _step(cache, q)
    monkeypatch.delenv("FOLD_DECODE_L2PROMO")
    got = _step(cache, q)
    assert torch.equal(expect[0].view(torch.int16), got[0].view(torch.int16))


@pytest.mark.parametrize(
    "dtype,D,Hkv,G", [(torch.bfloat16, 128, 2, 4), (torch.float16, 64, 2, 8), (torch.bfloat16, 128, 1, 20)]
)
@pytest.mark.parametrize("depth", [16.0, 12.0])
@pytest.mark.parametrize("screen", ["1", "0"])
def test_decode_screen_ring_matches_cpu(dtype, D, Hkv, G, depth, screen, monkeypatch):
    # FOLD_DECODE_SCREEN_RING=1 runs the screened split at D 64 / 128 through the opt-in
    # plane-A ring, pipelined by one chunk; "0" (the default) the plain split kernel. Both match
    # the CPU reference within one rounding and count the same reads, on ragged lengths.
    monkeypatch.setenv("FOLD_DECODE_SCREEN_RING", screen)
    _ragged_step_matches_cpu(dtype, D, Hkv, G, 8, depth=depth)


@pytest.mark.parametrize(
    "dtype,D,Hkv,G,page",
    [(torch.bfloat16, 128, 2, 4, 128), (torch.float16, 64, 3, 3, 64), (torch.bfloat16, 64, 2, 1, 256),
     (torch.bfloat16, 128, 1, 2, 64), (torch.bfloat16, 128, 2, 8, 64), (torch.float16, 64, 1, 6, 128),
     (torch.bfloat16, 128, 1, 16, 64), (torch.float16, 64, 2, 12, 128), (torch.bfloat16, 128, 1, 9, 128)],
)
@pytest.mark.parametrize("depth", [16.0, 8.0])
@pytest.mark.parametrize("sa,pipe,pair", [("0", "0", "0"), ("0", "1", "0"), ("1", "0", "0"), ("0", "0", "1")])
def test_decode_split2_same_bits(dtype, D, Hkv, G, page, depth, sa, pipe, pair, monkeypatch):
    # The screened split at G <= 16 runs with two 64-key halves per thread (FOLD_DECODE_SPLIT2=0:
    # the one-half split kernel; decode_split2.cuh; G 9-16: two row blocks). Same arithmetic and orders: the same
    # output, LSE and read statistics bit for bit, on ragged lengths (partial halves and steps,
    # empty requests) and pages of 64 keys (a page boundary between a step's halves); and the
    # CPU reference within one rounding.
    # FOLD_DECODE_SPLIT2_SA=1: plane A through shared memory (three blocks per SM at D 128;
    # G 9-16, two row blocks, always runs from registers). FOLD_DECODE_SPLIT2_PIPE=1: the next
    # step's screen and gathers before a step's value product (the default on grids of at most
    # one block per SM, as here; the register forms only), 0 the register forms in step order.
    # FOLD_DECODE_SPLIT2_PAIR=1: two warp groups screening steps 2k and 2k + 1 at once.
    if G > 8 and sa == "1":
        pytest.skip("G 9-16 runs from registers only (SA is never picked there)")
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", sa)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_PIPE", pipe)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_PAIR", pair)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_WIDE", "1")  # G 5-16 (no effect at G <= 4)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_G16", "1")  # G 9-16
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=11, dtype=dtype)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 2100, page_size=page, dtype=dtype, depth=depth)
    _fill((cpu, gpu), k, v, RAGGED, chunks=2)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2", "0")
    o0, l0, s0 = _step(gpu, q)
    monkeypatch.setenv("FOLD_DECODE_SPLIT2", "1")
    o1, l1, s1 = _step(gpu, q)
    assert torch.equal(o0.view(torch.int16), o1.view(torch.int16))
    assert torch.equal(l0.view(torch.int32), l1.view(torch.int32))
    assert s0 == s1, (s0, s1)
    oc, lc, sc = _step(cpu, q)
    _assert_matches(oc, o1, lc, l1, exact=False)
    assert sc == s1, (sc, s1)


@pytest.mark.parametrize("dtype,D,Hkv,G,v8", [(torch.float16, 64, 3, 3, False), (torch.bfloat16, 64, 2, 4, False),
                                              (torch.bfloat16, 64, 3, 3, True)])
@pytest.mark.parametrize("sa", ["0", "1"])
def test_decode_split2_occupancy_same_bits(dtype, D, Hkv, G, v8, sa, monkeypatch):
    # split2's instances at two, three and four blocks per SM (FOLD_DECODE_SPLIT2_OCC; D 64,
    # G <= 4: registers or, SA, plane A through shared memory) differ only in their register
    # bound: the same output, LSE and statistics bit for bit.
    monkeypatch.setenv("FOLD_DECODE_SCREEN", "1")
    monkeypatch.setenv("FOLD_DECODE_SPLIT2_SA", sa)
    B = len(RAGGED)
    q, k, v = synth(B, Hkv, G, D, 2100, seed=13, dtype=dtype)
    gpu = _make(CUDA, B, Hkv * G, Hkv, D, 2100, page_size=128, dtype=dtype, depth=16.0, v8=v8)
    _fill((gpu,), k, v, RAGGED, chunks=2)
    runs = []
    for occ in ("2", "3", "4"):
        monkeypatch.setenv("FOLD_DECODE_SPLIT2_OCC", occ)
        runs.append(_step(gpu, q))
    for o, lse, st in runs[1:]:
        assert torch.equal(o.view(torch.int16), runs[0][0].view(torch.int16))
        assert torch.equal(lse.view(torch.int32), runs[0][1].view(torch.int32))
        assert st == runs[0][2], (st, runs[0][2])


@pytest.mark.parametrize("pdl", ["1", "0"])
@pytest.mark.parametrize("depth", [None, 16.0, 12.0])
def test_decode_pdl_matches_cpu(depth, pdl, monkeypatch):
    # Programmatic dependent launches between the decode kernels (the default; FOLD_DECODE_PDL=0
    # turns them off): the CPU's output (see _assert_matches), eager and under CUDA-graph replay
    # with an append.
    monkeypatch.setenv("FOLD_DECODE_PDL", pdl)
    lengths, B, Hkv, G, D = RAGGED, len(RAGGED), 2, 4, 128
    cpu, gpu, q = _ragged_step_matches_cpu(torch.bfloat16, D, Hkv, G, 7, max_len=2200, depth=depth)
    ks, vs = torch.randn(B, Hkv, D).bfloat16(), torch.randn(B, Hkv, D).bfloat16()
    expected = _step(cpu, q, ks, vs)
    for b, n in enumerate(lengths):
        if n is not None:
            gpu._reserve(b, n + 1)
    sq, sk, sv = q.to(CUDA), ks.to(CUDA), vs.to(CUDA)
    out = torch.empty(B, Hkv * G, D, dtype=torch.bfloat16, device=CUDA)
    lse = torch.empty(B, Hkv * G, dtype=torch.float32, device=CUDA)
    gpu._cuda_buffers()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        decode_step_cuda(gpu, sq, sk, sv, out, lse)
    g.replay()
    torch.cuda.synchronize()
    _assert_matches(expected[0], out.cpu(), expected[1], lse.cpu(), exact=False)


@pytest.mark.parametrize("depth", [None, 16.0])
def test_decode_many_groups_matches_cpu(depth):
    # B * Hkv = 136 groups, more than the H200's SMs: the front runs 8 rows per block (one row
    # per block below that), an append step included.
    B, Hkv, G, D = 17, 8, 2, 64
    lengths = [int(x) for x in torch.randint(1, 600, (B,), generator=torch.Generator().manual_seed(3))]
    q, k, v = synth(B, Hkv, G, D, 600, seed=11)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, 640, depth=depth)
    _fill((cpu, gpu), k, v, lengths)
    ks, vs = torch.randn(B, Hkv, D).bfloat16(), torch.randn(B, Hkv, D).bfloat16()
    for kk, vv in ((None, None), (ks, vs)):
        oc, lc, sc = _step(cpu, q, kk, vv)
        og, lg, sg = _step(gpu, q, kk, vv)
        _assert_matches(oc, og, lc, lg, exact=False)
        assert sc == sg, (sc, sg)


def test_decode_long_context_matches_cpu():
    # 33000 keys = 65 splits: the combine stages its partials in two batches of splits.
    B, Hkv, G, D, L = 1, 1, 3, 64, 33000
    q, k, v = synth(B, Hkv, G, D, L, seed=12)
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, L, depth=16.0)
    _fill((cpu, gpu), k, v, [L])
    oc, lc, sc = _step(cpu, q)
    og, lg, sg = _step(gpu, q)
    _assert_matches(oc, og, lc, lg, exact=False)
    assert sc == sg, (sc, sg)


def test_guard_fixup_matches_cpu():
    # A needle key aligned with the query, far above the rest, that neither the strata nor
    # the heavy list (taken by larger decoys orthogonal to the query) sample: Z undershoots,
    # T leaves fp16's 2^14 window, the guard recomputes the group with the exact LSE.
    torch.manual_seed(1)
    D, L = 64, 1000
    u = torch.zeros(D)
    u[0] = 1.0
    w = torch.zeros(D)
    w[1] = 1.0
    k = torch.randn(1, L, 1, D) * 0.3
    for j in range(100, 900, 90):
        k[0, j, 0] = 40.0 * w
    k[0, 437, 0] = 21.0 * u  # 21 nats = 30 binades above the rest
    v = torch.randn(1, L, 1, D)
    q = (8.0 * u).expand(1, 2, D).clone()
    for dtype in (torch.float16, torch.bfloat16):
        cpu, gpu = _pair(1, 2, 1, D, L, depth=12.0, dtype=dtype)
        _fill((cpu, gpu), k.to(dtype), v.to(dtype), [L])
        oc, og, lc, lg, sc, sg = _compare_step(cpu, gpu, q.to(dtype))
        print(f"\n{dtype}: fixup rows cpu {sc['fixup_rows']} gpu {sg['fixup_rows']}")
        if dtype == torch.float16:
            assert sg["fixup_rows"] > 0
        _assert_matches(oc, og, lc, lg, exact=False)
        assert sg == sc, (sg, sc)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_guard_second_pass_with_huge_keys_matches_cpu(dtype):
    # Keys of huge norm: the coarse logit of a row's heaviest key can sit 100+ binades below its
    # fine one. The guard's second pass takes Z over the fine logits and cuts nothing (session
    # 31), on the GPU as in the CPU reference: finite LSE, the reference's output.
    flagged = 0
    for seed in range(6):
        torch.manual_seed(seed)
        scale = 8192 if dtype == torch.bfloat16 else 2000
        k = (torch.randn(1, 40, 2, 64) * scale).to(dtype)
        v = torch.randn(1, 40, 2, 64).to(dtype)
        q = torch.randn(1, 4, 64).to(dtype)
        cpu, gpu = _pair(1, 4, 2, 64, 128, depth=16.0, dtype=dtype)
        _fill((cpu, gpu), k, v, [40])
        oc, og, lc, lg, sc, sg = _compare_step(cpu, gpu, q)
        flagged += sg["fixup_rows"]
        assert torch.isfinite(lg).all(), (seed, lg)
    # Since the coarse error bound (planes.h) these keys are never cut, so the guard need not
    # fire; _compare_step still holds the GPU to the reference (output, LSE, statistics).


def _needle_batch(B, Hkv, D, L):
    # test_guard_fixup_matches_cpu's needle in every (request, KV head), at a position that
    # depends on the request: every group's Z undershoots and the guard flags it.
    torch.manual_seed(2)
    u = torch.zeros(D)
    u[0] = 1.0
    w = torch.zeros(D)
    w[1] = 1.0
    k = torch.randn(B, L, Hkv, D) * 0.3
    for j in range(100, 900, 90):
        k[:, j] = 40.0 * w
    for b in range(B):
        k[b, 431 + b % 20] = 21.0 * u
    v = torch.randn(B, L, Hkv, D)
    return k, v, u


@pytest.mark.parametrize("depth", [12.0, None])
def test_guard_many_flagged_groups(depth):
    # ~250 flagged groups (of 288): more than the pass-1 grid takes at once (at most one SM count
    # of groups), so its blocks each recompute several groups from the guard's list, in an order
    # that depends on timing. Every group must match the CPU reference, and a request's bits
    # must be the same alone as in the batch.
    B, Hkv, G, D, L = 72, 4, 2, 64, 1000
    k, v, u = _needle_batch(B, Hkv, D, L)
    q = (8.0 * u).expand(B, Hkv * G, D).clone().half()
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, L, depth=depth, dtype=torch.float16)
    _fill((cpu, gpu), k.half(), v.half(), [L] * B)
    oc, og, lc, lg, sc, sg = _compare_step(cpu, gpu, q)
    print(f"\nfixup rows cpu {sc['fixup_rows']} gpu {sg['fixup_rows']}")
    assert sg["fixup_rows"] > 2 * torch.cuda.get_device_properties(0).multi_processor_count
    for b in (7, 50):
        alone = _make(CUDA, 1, Hkv * G, Hkv, D, L, depth=depth, dtype=torch.float16)
        _fill((alone,), k[b : b + 1].half(), v[b : b + 1].half(), [L])
        oa, la, sa = _step(alone, q[b : b + 1])
        assert sa["fixup_rows"] > 0  # the group went through pass 1 alone too
        assert torch.equal(_bits(oa[0]), _bits(og[b]))
        assert torch.equal(_bits(la[0]), _bits(lg[b]))


@pytest.mark.parametrize("v8", [False, True])
def test_guard_flagged_groups_ragged(v8):
    # Pass 1 over the guard's list with ragged lengths (a released slot, lengths 500-998, so
    # groups end at different splits), D 128 and G 8 (each group's last pass-1 split combines
    # four blocks' worth, one after the other) and v8 values (stage rows of the previous item
    # must not leak): about half the groups are flagged. Against the CPU reference, and alone =
    # in the batch.
    B, Hkv, G, D, L = 40, 2, 8, 128, 1000
    k, v, u = _needle_batch(B, Hkv, D, L)
    lengths = [500 + (37 * b) % 501 for b in range(B)]
    lengths[5] = None
    # v8 rows take the bf16 guard window (T up to 2^60, not fp16's 2^14): a stronger needle.
    q = ((32.0 if v8 else 12.0) * u).expand(B, Hkv * G, D).clone().half()
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, L, depth=12.0, dtype=torch.float16, v8=v8)
    _fill((cpu, gpu), k.half(), v.half(), lengths)
    oc, og, lc, lg, sc, sg = _compare_step(cpu, gpu, q)
    print(f"\nfixup rows cpu {sc['fixup_rows']} gpu {sg['fixup_rows']}")
    assert 0 < sg["fixup_rows"] < (B - 1) * Hkv * G
    for b in (3, 12, 25):  # (on the CPU, v8 on and off: 3 is not flagged, 12 and 25 are)
        alone = _make(CUDA, 1, Hkv * G, Hkv, D, L, depth=12.0, dtype=torch.float16, v8=v8)
        _fill((alone,), k[b : b + 1].half(), v[b : b + 1].half(), [lengths[b]])
        oa, la, sa = _step(alone, q[b : b + 1])
        assert (sa["fixup_rows"] > 0) == (b != 3)
        assert torch.equal(_bits(oa[0]), _bits(og[b]))
        assert torch.equal(_bits(la[0]), _bits(lg[b]))


@pytest.mark.parametrize("depth,v8", [(None, False), (16.0, False), (12.0, False), (16.0, True), (12.0, True)])
def test_error_against_float64(depth, v8):
    B, Hkv, G, D, L = 2, 2, 4, 128, 3000
    q, k, v = synth(B, Hkv, G, D, L, seed=0)
    lengths = [L, 1900]
    refs = [reference(q[b], k[b, : lengths[b]], v[b, : lengths[b]], default_scale(D)) for b in range(B)]
    ref = torch.stack([r[0] for r in refs])
    cpu, gpu = _pair(B, Hkv * G, Hkv, D, L, depth=depth, v8=v8)
    _fill((cpu, gpu), k, v, lengths)
    oc, og, *_ = _compare_step(cpu, gpu, q)
    ec, eg, floor = rel_err(oc, ref), rel_err(og, ref), floor_err(ref)
    print(f"\ndepth={depth} v8={v8}: cuda {eg:.4e} cpu {ec:.4e} ({eg / floor:.3f} x floor)")
    # The tensor-core path sums in another order: its error may differ from the CPU's by a hair.
    assert eg <= ec * (1 + (1e-2 if tensor_core_path(v8, D, depth, G) else 1e-3)) + 1e-7
    assert eg <= 1.5 * floor


def test_bit_identical_alone_and_in_batch():
    D, Hkv, G = 128, 2, 4
    q, k, v = synth(4, Hkv, G, D, 1500, seed=7)
    alone = _make(CUDA, 1, Hkv * G, Hkv, D, 1500, depth=12.0)
    _fill((alone,), k[2:3], v[2:3], [1400])
    batch = _make(CUDA, 4, Hkv * G, Hkv, D, 1500, depth=12.0)
    # Slot 2 is released and claimed again, so its pages are reused ones.
    _fill((batch,), k, v, [300, 900, None, 1100])
    assert batch.add_request() == 2
    batch.extend(2, k[2, :1400].to(CUDA), v[2, :1400].to(CUDA))
    oa, la, _ = _step(alone, q[2:3])
    ob, lb, _ = _step(batch, q)
    assert torch.equal(_bits(oa[0]), _bits(ob[2]))
    assert torch.equal(_bits(la[0]), _bits(lb[2]))


def _graph_replays_match_eager(D, G, lengths, depth, seed, steps, capture):
    # Two caches filled alike; steps with an append each, eager on one and as replays of one
    # captured step (`capture(cache, q, k, v)` -> out, lse) on the other: same bits, same caches.
    Hkv, B = 2, len(lengths)
    q, k, v = synth(B, Hkv, G, D, 700, seed=seed)
    caches = []
    for _ in range(2):
        c = _make(CUDA, B, Hkv * G, Hkv, D, 800, depth=depth)
        for b, n in enumerate(lengths):
            assert c.add_request(length=800) == b
            c.extend(b, k[b, :n].to(CUDA), v[b, :n].to(CUDA))
        caches.append(c)
    eager, graphed = caches
    qs = [torch.randn(B, Hkv * G, D).bfloat16().to(CUDA) for _ in range(steps)]
    ks = [torch.randn(B, Hkv, D).bfloat16().to(CUDA) for _ in range(steps)]
    vs = [torch.randn(B, Hkv, D).bfloat16().to(CUDA) for _ in range(steps)]
    expected = [fa.fold_attn_with_kvcache(qs[i], eager, ks[i], vs[i], return_lse=True) for i in range(steps)]
    assert graphed.lengths.tolist() == list(lengths)
    assert_graph_replays(graphed, capture, qs, ks, vs, expected)
    _assert_same_cache(eager, graphed)


def test_cuda_graph_append_and_attend():
    def capture(cache, q, k, v):
        out = torch.empty(q.shape, dtype=torch.bfloat16, device=CUDA)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=CUDA)
        decode_step_cuda(cache, q, k, v, out, lse)
        return out, lse

    _graph_replays_match_eager(128, 4, [600, 100, 350], 16.0, seed=9, steps=5, capture=capture)


def test_cuda_graph_of_the_public_step():
    # fold_attn_with_kvcache itself captured in a CUDA graph (its host checks are skipped while
    # capturing; pages reserved up front): replays append and attend with the eager bits.
    def capture(cache, q, k, v):
        return fa.fold_attn_with_kvcache(q, cache, k, v, return_lse=True)

    _graph_replays_match_eager(64, 3, [500, 1, 321], None, seed=12, steps=4, capture=capture)


def test_step_without_room_is_rejected_on_device_not_written():
    # decode_step_cuda checks nothing on the host (graphs, compiled steps): a full request
    # must not be written out of bounds; it is attended without the token and counted.
    D, Hkv, G, B = 64, 2, 2, 2
    q, k, v = synth(B, Hkv, G, D, 64, seed=4)
    c = _make(CUDA, B, Hkv * G, Hkv, D, 64, depth=16.0)
    for b, n in enumerate([64, 10]):  # request 0 is full; request 1 has pages for 10 only
        assert c.add_request(length=n) == b
        c.extend(b, k[b, :n].to(CUDA), v[b, :n].to(CUDA))
    pages = c.page_table.clone()
    qs = torch.randn(B, Hkv * G, D).bfloat16().to(CUDA)
    ks = torch.randn(B, Hkv, D).bfloat16().to(CUDA)
    vs = torch.randn(B, Hkv, D).bfloat16().to(CUDA)
    ref_out, ref_lse = fa.fold_attn_with_kvcache(qs, c, return_lse=True)
    out = torch.empty_like(ref_out)
    lse = torch.empty_like(ref_lse)
    decode_step_cuda(c, qs, ks, vs, out, lse)
    torch.cuda.synchronize()
    assert c.lengths.tolist() == [64, 11]  # request 1 had a reserved slot in its page
    assert torch.equal(c.page_table, pages)
    assert c.stats()["rejected_appends"] == 1
    assert torch.equal(_bits(out[0]), _bits(ref_out[0]))
    assert torch.equal(_bits(lse[0]), _bits(ref_lse[0]))


def test_cpu_cache_given_cuda_tensors_says_which_device_to_build_it_on():
    # The seed README's example as written: FoldKVCache without a device (so 'cpu'), then CUDA
    # tensors. Refused, naming the tensor and the device to build the cache on; nothing written.
    D, Hkv, G, B, L = 64, 2, 2, 2, 16
    cache = fa.FoldKVCache(B, Hkv * G, Hkv, D, 64, depth=16)
    q, k, v = (torch.randn(B * L, h, D, dtype=torch.bfloat16, device=CUDA) for h in (Hkv * G, Hkv, Hkv))
    cu = torch.tensor([0, L, 2 * L], dtype=torch.int32, device=CUDA)
    with pytest.raises(NotImplementedError, match=r"q is on cuda:\d+ but the cache is on cpu: build the cache"):
        cache.prefill(q, k, v, cu)
    assert cache.lengths.tolist() == [-1, -1]
    with pytest.raises(NotImplementedError, match=r"device='cuda:\d+'"):
        fa.fold_attn_with_kvcache(q[:B], cache)


def test_seed_readme_decode_example_under_the_default_device():
    # The seed README's decode example names no device; with torch's default device set to the
    # GPU, FoldKVCache(device=None) takes it and the example runs as written, with the outputs
    # of a cache built with device=CUDA.
    D, Hkv, G, B, L = 64, 2, 4, 2, 40
    H = Hkv * G
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B * L, h, D, generator=gen).bfloat16().to(CUDA) for h in (H, Hkv, Hkv))
    qs, ks, vs = (torch.randn(B, h, D, generator=gen).bfloat16().to(CUDA) for h in (H, Hkv, Hkv))
    cu = torch.tensor([0, L, 2 * L], dtype=torch.int32, device=CUDA)
    with torch.device(CUDA):
        cache = fa.FoldKVCache(batch=B, n_heads=H, n_kv_heads=Hkv, head_dim=D, max_len=128, depth=16)
    assert cache.device.type == "cuda"
    prompt_out = cache.prefill(q, k, v, cu)
    step_out = fa.fold_attn_with_kvcache(qs, cache, ks, vs)
    ref = fa.FoldKVCache(batch=B, n_heads=H, n_kv_heads=Hkv, head_dim=D, max_len=128, depth=16, device=CUDA)
    assert torch.equal(_bits(prompt_out), _bits(ref.prefill(q, k, v, cu)))
    assert torch.equal(_bits(step_out), _bits(fa.fold_attn_with_kvcache(qs, ref, ks, vs)))

import pytest

from benchmarks import bytes_model as bm


def test_bytes_per_key_reference_points():
    # ALGORITHMS.md at D=128: bf16 cache 512, plane A alone 130, dense fold 514
    assert bm.bf16_kv_bytes_per_key(128) == 512
    assert bm.fold_bytes_per_key(128, live_frac=1.0) == 514
    assert bm.fold_bytes_per_key(128, live_frac=0.0) == 130
    assert bm.fold_bytes_per_key(128, live_frac=1.0, v8=True) == 514
    # live keys read V (2D) and, by default, plane B (D): 130 + 0.25 * 384
    assert bm.fold_bytes_per_key(128, live_frac=0.25) == pytest.approx(130 + 0.25 * 384)
    # v8: light live keys read V plane A only
    assert bm.fold_bytes_per_key(128, live_frac=0.5, refine_frac=0.1, v8=True, v_refine_frac=0.1) == \
        pytest.approx(130 + 0.1 * 128 + 0.5 * 128 + 0.1 * 128)


def test_bounds_checked():
    with pytest.raises(ValueError):
        bm.fold_bytes_per_key(128, live_frac=1.5)
    with pytest.raises(ValueError):
        bm.fold_bytes_per_key(128, live_frac=0.5, refine_frac=-0.1)


def test_case_bytes_and_bandwidth():
    # B=32, L=8192, Hkv=8, D=128 bf16: K+V read once
    kv = bm.case_bytes(32, 8, 8192, bm.bf16_kv_bytes_per_key(128))
    assert kv == 32 * 8 * 8192 * 512
    with_qo = bm.case_bytes(32, 8, 8192, 512, head_dim=128, n_heads=32)
    assert with_qo == kv + 32 * 32 * 128 * 2 * 2
    tbs = bm.bandwidth_tbs(kv, 246.3e-6)
    assert tbs == pytest.approx(4.36, rel=0.01)      # MEASURING.md: cuDNN 246.3 us, 4.36 TB/s
    assert bm.pct_of_ceiling(4.5, 4.55) == pytest.approx(98.9, rel=1e-3)
    assert bm.pct_of_ceiling(4.5, None) is None

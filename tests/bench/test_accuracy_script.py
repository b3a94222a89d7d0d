"""benchmarks.decode_accuracy on a small synthetic capture (CPU reference backend)."""
import json

import pytest
import torch

from benchmarks import captures, decode_accuracy


def test_decode_accuracy_runs_real_decode_steps(tmp_path, monkeypatch):
    pytest.importorskip("fold_attention")
    g = torch.Generator().manual_seed(0)
    L, H, Hkv, D = 300, 4, 2, 64
    positions = list(range(255, L))
    layers = {"0": {"q": torch.randn(len(positions), H, D, generator=g).bfloat16(),
                    "k": torch.randn(L, Hkv, D, generator=g).bfloat16(),
                    "v": (torch.randn(L, Hkv, D, generator=g) + 1.0).bfloat16()}}
    meta = {"model": "synthetic", "n_tokens": L, "n_heads": H, "n_kv_heads": Hkv, "head_dim": D,
            "softmax_scale": D ** -0.5, "query_positions": positions}
    captures.save_capture(meta, layers, str(tmp_path), stem="synthetic")
    monkeypatch.setenv("FOLD_CAPTURE_DIR", str(tmp_path))
    monkeypatch.setattr(captures, "capture_dirs", lambda: [str(tmp_path)])
    out = tmp_path / "acc.json"
    assert decode_accuracy.main(["--start", "260", "--stride", "5", "--depths", "none,12",
                                 "--out", str(out)]) == 0
    res = json.loads(out.read_text())["layers"]["0"]
    dense, cut = res["dense"], res["depth12"]
    assert dense["steps"] == cut["steps"] == 8
    assert dense["live_frac_mean"] == 1.0 and 0.0 < cut["live_frac_mean"] <= 1.0
    # dense decode sits at the bf16 floor (rounding of the exact output), as the spec promises
    assert 0.9 < dense["x_floor_median"] < 1.3
    assert cut["err_max"] < 0.05

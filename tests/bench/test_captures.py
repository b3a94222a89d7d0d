import os

import pytest
import torch

from benchmarks import captures
from benchmarks.reference import causal_mask_attention, decode_reference


def test_roundtrip_hash_and_lookup(tmp_path, monkeypatch):
    meta, layers = captures.synthetic_capture(n_tokens=200, layers=(0, 5))
    path = captures.save_capture(meta, layers, str(tmp_path), stem="tiny")
    cid = captures.capture_hash(meta, {str(k): v for k, v in layers.items()})
    assert os.path.basename(path) == f"tiny-{cid}.pt" and len(cid) == 16
    cap = captures.Capture(path)
    assert cap.capture_id == cid and cap.layer_ids == ["0", "5"] and cap.n_tokens == 200
    k, v = cap.kv("5", 120)
    assert k.shape == (120, 1, 16) and k.dtype == torch.bfloat16
    pos = cap.query_positions[-1]
    assert pos == 199 and torch.equal(cap.q_at("0", pos), layers["0"]["q"][-1])
    monkeypatch.setenv("FOLD_CAPTURE_DIR", str(tmp_path))
    assert path in captures.find_captures()
    assert [c.capture_id for c in captures.load_all()][0] == cid
    # the same content gives the same id; different content a different one
    assert captures.capture_hash(meta, layers) == cid
    meta2, layers2 = captures.synthetic_capture(n_tokens=200, layers=(0, 5), seed=1)
    assert captures.capture_hash(meta2, layers2) != cid


def test_tampered_capture_is_rejected(tmp_path):
    meta, layers = captures.synthetic_capture(n_tokens=64, layers=(1,))
    path = captures.save_capture(meta, layers, str(tmp_path))
    d = torch.load(path, weights_only=True)
    d["layers"]["1"]["k"][0, 0, 0] += 1
    torch.save(d, path)
    with pytest.raises(ValueError):
        captures.Capture(path)
    captures.Capture(path, verify=False)
    bad = tmp_path / "other.pt"
    torch.save({"format": "nope"}, str(bad))
    with pytest.raises(ValueError):
        captures.Capture(str(bad))


def test_capture_decode_reference_matches_causal_attention():
    """A decode query at position L-1 over keys 0..L-1 equals the last row of causal
    attention; GQA maps head h to KV head h // G (torch's enable_gqa)."""
    meta, layers = captures.synthetic_capture(n_tokens=128, n_heads=4, n_kv_heads=2, layers=(0,))
    cap_q = layers["0"]["q"]
    k, v = layers["0"]["k"], layers["0"]["v"]
    L = 128
    pos = meta["query_positions"].index(L - 1)
    q = cap_q[pos]                                            # (H, D)
    out = decode_reference(q[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])[0]
    qfull = torch.zeros(L, 4, 16, dtype=torch.bfloat16)
    qfull[-1] = q
    full = causal_mask_attention(qfull, k, v, causal=True)[-1]
    assert torch.allclose(out, full, atol=1e-12)
    sd = torch.nn.functional.scaled_dot_product_attention(
        q.double()[None, :, None], k.double().transpose(0, 1)[None], v.double().transpose(0, 1)[None],
        enable_gqa=True)[0, :, 0]
    assert torch.allclose(out, sd, atol=1e-10)


def test_capture_problem_repeats_the_request_over_a_batch(tmp_path, monkeypatch):
    # benchmarks.decode's batched capture cases: the request at length L (its query the token at
    # L - 1), repeated as separate copies; batch 1 is the plain case.
    from benchmarks import decode
    from benchmarks import device as dev

    monkeypatch.setattr(dev, "DEVICE", "cpu")
    meta, layers = captures.synthetic_capture(n_tokens=200, layers=(0,))
    cap = captures.Capture(captures.save_capture(meta, layers, str(tmp_path), stem="tiny"))
    one = decode.capture_problem(cap, "0", 128)
    many = decode.capture_problem(cap, "0", 128, batch=3)
    assert one.q.shape == (1, 3, 16) and one.k.shape == (1, 1, 128, 16)
    assert many.q.shape == (3, 3, 16) and many.k.shape == (3, 1, 128, 16) and many.v.shape == many.k.shape
    for b in range(3):
        assert torch.equal(many.q[b], one.q[0]) and torch.equal(many.k[b], one.k[0])
        assert torch.equal(many.v[b], one.v[0])
    assert all(t.stride(0) != 0 and t.is_contiguous() for t in (many.q, many.k, many.v))  # copies
    assert decode.case_name(many).endswith("B3-L128-H3/1-D16")

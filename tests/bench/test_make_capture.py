"""The capture maker's pieces that need no model: tokenizer and rotary embedding."""
import pytest
import torch

from benchmarks import make_capture as mc


def test_bytes_to_unicode_is_a_bijection():
    m = mc.bytes_to_unicode()
    assert len(m) == 256 and len(set(m.values())) == 256
    assert m[ord("a")] == "a" and m[ord(" ")] == "Ġ"


def test_bpe_merges_by_rank():
    pytest.importorskip("regex")
    # vocabulary: single byte symbols and two merges; "Ġ" is the space
    tokens = ["h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "hell", "Ġw", "1", "2"]
    merges = ["h e", "l l", "he ll", "Ġ w"]
    tok = mc.BPETokenizer(tokens, merges)
    ids = tok.encode("hello world 12")
    words = [tokens[i] for i in ids]
    assert words[:2] == ["hell", "o"]
    assert "Ġw" in words
    # digits are split one by one (the "smollm" pre-tokenizer)
    assert words[-2:] == ["1", "2"]


def test_rope_adjacent_pairs_is_a_relative_rotation():
    cls = mc.GGUFModel.__new__(mc.GGUFModel)
    cls.rope_dim, cls.rope_theta = 8, 10000.0
    cos, sin = cls.rope_tables(16)
    q = torch.randn(1, 1, 8).expand(16, 1, 8).contiguous()
    k = torch.randn(1, 1, 8).expand(16, 1, 8).contiguous()
    qr, kr = mc.GGUFModel.apply_rope(q, cos, sin), mc.GGUFModel.apply_rope(k, cos, sin)
    # norms kept; the logit depends only on the distance m - n
    assert torch.allclose(qr.norm(dim=-1), q.norm(dim=-1), atol=1e-5)
    a = (qr[5] * kr[2]).sum()
    b = (qr[9] * kr[6]).sum()
    assert torch.allclose(a, b, atol=1e-4)
    # position 0 is the identity
    assert torch.allclose(qr[0], q[0])

"""Package surface: exports, version, library loading."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fold_attention as fa
from fold_attention import _lib


def test_exports():
    for name in (
        "fold_attn_func",
        "fold_attn_varlen_func",
        "FoldKVCache",
        "fold_attn_with_kvcache",
        "__version__",
        "built_with_cuda",
    ):
        assert hasattr(fa, name), name
    assert fa.__version__ == "0.1.0"


def test_library_loads_and_reports():
    assert isinstance(fa.built_with_cuda(), bool)
    assert fa.library_version().startswith(fa.__version__)
    assert _lib.library_path().name.startswith(_lib.LIBRARY_NAME)


def test_import_does_not_load_library_or_need_a_gpu():
    code = (
        "import fold_attention, fold_attention._lib as l; "
        "assert l._lib is None; print('ok')"
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fa.__file__).parent.parent)] + sys.path)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def test_env_var_must_name_a_file(monkeypatch, tmp_path):
    monkeypatch.setenv(_lib.ENV_VAR, str(tmp_path / "missing.so"))
    with pytest.raises(OSError, match=_lib.ENV_VAR):
        _lib._find_library()


def test_env_var_wins(monkeypatch, tmp_path):
    fake = tmp_path / "libother.so"
    fake.write_bytes(b"")
    monkeypatch.setenv(_lib.ENV_VAR, str(fake))
    assert _lib._find_library() == fake


def test_status_mapping(monkeypatch):
    monkeypatch.setattr(_lib, "last_error", lambda: "q: bad thing")
    with pytest.raises(ValueError, match="q: bad thing"):
        _lib.check(_lib.Status.ERR_INVALID_ARGUMENT, "fold_fwd_cpu")
    with pytest.raises(NotImplementedError, match="bad thing"):
        _lib.check(_lib.Status.ERR_UNSUPPORTED, "fold_fwd_cpu")
    with pytest.raises(RuntimeError, match="without|no CUDA"):
        _lib.check(_lib.Status.ERR_NO_CUDA, "fold_bwd_preprocess_cuda")
    with pytest.raises(_lib.FoldAttentionError) as info:
        _lib.check(_lib.Status.ERR_CUDA, "fold_bwd_preprocess_cuda")
    assert info.value.status == _lib.Status.ERR_CUDA
    _lib.check(_lib.Status.OK, "fold_fwd_cpu")


def test_struct_layout_matches_header():
    import ctypes

    assert ctypes.sizeof(_lib.FoldTensor) == 32
    assert ctypes.sizeof(_lib.FoldAttnProblem) == 64
    from fold_attention._decode_lib import FoldKVCacheDesc

    assert ctypes.sizeof(FoldKVCacheDesc) == 136  # decode_cpu.cpp's static_asserts
    assert FoldKVCacheDesc.lengths.offset == 120 and FoldKVCacheDesc.pinned_window.offset == 128
    assert _lib.FoldAttnProblem.cu_seqlens.offset == 8
    assert _lib.FoldAttnProblem.total_tokens.offset == 16
    assert _lib.FoldAttnProblem.softmax_scale.offset == 44
    assert _lib.FoldAttnProblem.window_before.offset == 48
    assert _lib.FoldAttnProblem.window_after.offset == 52
    assert _lib.FoldAttnProblem.sinks.offset == 56


def test_library_rejects_a_bad_problem_with_a_message():
    """The binding's struct reaches the library intact and errors come back as text."""
    import ctypes

    lib = _lib.library()
    p = _lib.FoldAttnProblem(
        batch=2, seqlen=3, cu_seqlens=None, total_tokens=6, n_heads=4, n_kv_heads=2,
        head_dim=64, dtype=_lib.DType.BF16, causal=1, softmax_scale=0.125,
    )
    assert lib.fold_check_problem(ctypes.byref(p), 1) == _lib.Status.OK
    p.n_kv_heads = 3
    status = lib.fold_check_problem(ctypes.byref(p), 1)
    with pytest.raises(ValueError, match="n_kv_heads"):
        _lib.check(status, "fold_check_problem")
    p.n_kv_heads, p.total_tokens = 2, 7
    with pytest.raises(ValueError, match="total_tokens"):
        _lib.check(lib.fold_check_problem(ctypes.byref(p), 1), "fold_check_problem")
    cu = (ctypes.c_int32 * 3)(0, 4, 3)
    p.cu_seqlens = ctypes.cast(cu, ctypes.POINTER(ctypes.c_int32))
    p.total_tokens, p.seqlen = 3, 5
    with pytest.raises(ValueError, match="cu_seqlens"):
        _lib.check(lib.fold_check_problem(ctypes.byref(p), 1), "fold_check_problem")

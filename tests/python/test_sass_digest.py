"""scripts/sass_digest.py: the per-kernel SASS digests that check a code move without a GPU.

The parser runs on a made-up cuobjdump dump (no cuobjdump here): the same instructions under
names whose path hashes differ must digest alike, and one changed operand must not."""

import importlib.util
import pathlib

_SPEC = importlib.util.spec_from_file_location(
    "sass_digest", pathlib.Path(__file__).resolve().parents[2] / "scripts" / "sass_digest.py")
sass_digest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sass_digest)


def _dump(path_hash: str, operand: str) -> str:
    # Two functions, with a fatbin section header between them that names a source path.
    return f"""
Fatbin elf code:
================
arch = sm_90a
identifier = /somewhere/{path_hash}/src/cuda/decode.cu

\t\tFunction : _ZN4fold4cuda50_GLOBAL__N__{path_hash}_9_decode_cu_0ed1ed6012front_kernelEv
\t.headerflags\t@"EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;         /* 0x00000a00ff017b82 */
                                                                  /* 0x000fe20000000800 */
        /*0010*/                   IADD3 R2, R1, {operand}, RZ ;  /* 0x0000000201027810 */
                                                                  /* 0x000fca0007ffe0ff */
        /*0020*/                   EXIT ;                         /* 0x000000000000794d */
        .....

Fatbin elf code:
================
identifier = /somewhere/{path_hash}/src/cuda/forward.cu

\t\tFunction : _ZN4fold4cuda3bwd6kernelEv
        /*0000*/                   EXIT ;                         /* 0x000000000000794d */
"""


def test_names_fold_their_path_hashes_and_headers_are_ignored():
    a = sass_digest.digests_of_dump(_dump("92ec400d", "0x4"))
    b = sass_digest.digests_of_dump(_dump("c0e13f86", "0x4"))
    assert a == b
    assert set(a) == {"_ZN4fold4cuda_GLOBAL__N__12front_kernelEv", "_ZN4fold4cuda3bwd6kernelEv"}
    assert a["_ZN4fold4cuda_GLOBAL__N__12front_kernelEv"][0] == 3  # instructions, not encodings
    assert a["_ZN4fold4cuda3bwd6kernelEv"][0] == 1


def test_a_changed_operand_changes_the_digest():
    a = sass_digest.digests_of_dump(_dump("92ec400d", "0x4"))
    b = sass_digest.digests_of_dump(_dump("92ec400d", "0x8"))
    key = "_ZN4fold4cuda_GLOBAL__N__12front_kernelEv"
    assert a[key] != b[key]
    assert a["_ZN4fold4cuda3bwd6kernelEv"] == b["_ZN4fold4cuda3bwd6kernelEv"]


def test_compare_reports_changed_added_and_removed(tmp_path, capsys):
    before, after = tmp_path / "before.txt", tmp_path / "after.txt"
    before.write_text("k1 10 aaaa\nk2 5 bbbb\nk3 7 cccc\n")
    after.write_text("k1 10 aaaa\nk2 6 dddd\nk4 7 cccc\n")
    rc = sass_digest.main(["--compare", str(before), str(after)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "changed" in out and "k2" in out and "removed  k3" in out and "added    k4" in out
    assert "1 identical, 1 changed, 1 removed, 1 added" in out
    assert sass_digest.main(["--compare", str(before), str(before)]) == 0

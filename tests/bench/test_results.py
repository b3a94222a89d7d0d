import json
import math
import os
import socket

from benchmarks import provenance, results


def test_writer_flushes_every_case(tmp_path):
    d1, d2 = tmp_path / "a", tmp_path / "b"
    w = results.ResultWriter("decode", [str(d1), str(d2), str(d1)], {"gpu": {"name": "X"}})
    assert len(w.paths) == 2
    w.case({"case": "c1", "err": float("nan"), "t": float("inf")})
    # readable after one case: an interrupted run keeps what it measured
    r = results.read_jsonl(str(d1 / "decode.jsonl"))
    assert r["run"]["suite"] == "decode" and len(r["cases"]) == 1
    c = r["cases"][0]
    assert math.isnan(results.from_json_float(c["err"])) and math.isinf(results.from_json_float(c["t"]))
    w.case({"case": "c2"})
    w.note({"skipped": "c3", "why": "budget"})
    # a truncated last line (killed mid-write) is tolerated
    with open(d2 / "decode.jsonl", "a") as f:
        f.write('{"type": "case", "case": "c4", "trunc')
    r2 = results.load_suite("decode", str(d2))
    assert [c["case"] for c in r2["cases"]] == ["c1", "c2"] and len(r2["notes"]) == 1
    # a new run replaces the file (latest run only)
    results.ResultWriter("decode", [str(d1)], {})
    assert results.read_jsonl(str(d1 / "decode.jsonl"))["cases"] == []


def test_sanitize_scrubs_identifying_strings():
    host = socket.gethostname()
    s = provenance.sanitize({
        "cmd": f"python -m benchmarks.decode --out /home/someone/secret/out on {host}",
        "uuid": "GPU-1a2b3c4d-1111-2222-3333-444455556666",
        "bus": "00000000:1B:00.0", "ip": "10.1.2.3",
        "repo": os.path.join(provenance.REPO_ROOT, "benchmarks", "results"),
        "nested": ["/usr/lib/x86_64-linux-gnu/libcuda.so", 3, None]})
    blob = json.dumps(s)
    assert "/home/someone" not in blob and "secret/" not in blob
    assert "1a2b3c4d" not in blob and "1B:00.0" not in blob and "10.1.2.3" not in blob
    assert provenance.REPO_ROOT not in blob
    if len(host) >= 3:
        assert host not in blob
    assert s["repo"] == "benchmarks/results"
    assert s["nested"][1] == 3 and s["nested"][2] is None
    assert "<path>/out" in s["cmd"]


def test_provenance_has_no_machine_identity(tmp_path):
    p = provenance.collect(config={"x": 1}, argv=["benchmarks/decode.py", "--out", str(tmp_path)])
    blob = json.dumps(p)
    assert p["command"].startswith("python -m benchmarks.decode")
    assert str(tmp_path) not in blob and provenance.REPO_ROOT not in blob
    host = socket.gethostname()
    if len(host) >= 3:
        assert host not in blob
    for key in ("gpu", "versions", "git", "command", "config"):
        assert key in p
    assert p["versions"]["torch"]
    assert "commit" in p["git"]
    # every optional library reports a version or "unavailable: why"
    for lib in ("flashinfer", "flash_attn_interface"):
        v = p["versions"][lib]
        assert isinstance(v, str) and v


def test_results_are_sanitized_on_write(tmp_path):
    w = results.ResultWriter("x", [str(tmp_path)], {"command": f"run at {provenance.REPO_ROOT}/bench"})
    w.case({"path": "/home/user/.cache/fold_attention/captures/a.pt"})
    text = open(tmp_path / "x.jsonl").read()
    assert provenance.REPO_ROOT not in text and "/home/user/" not in text


def test_provenance_labels_a_bundle_library_by_its_commit_file(tmp_path, monkeypatch):
    # A library in a .gpu*/ folder of the repository is labelled by the commit file beside it,
    # never by git (the GPU machine's copy of .git may be stale); without one, "unknown".
    monkeypatch.setattr(provenance, "REPO_ROOT", str(tmp_path))
    monkeypatch.setattr(provenance, "_run", lambda cmd: "deadbeef" if "rev-parse" in cmd else "")
    (tmp_path / ".gpu-ab").mkdir()
    (tmp_path / ".gpu-ab" / "commit").write_text("abc123\n+dirty\n")
    monkeypatch.setenv("FOLD_ATTENTION_LIBRARY", str(tmp_path / ".gpu-ab" / "libfold_attention.so"))
    assert provenance.git_commit() == {"commit": "abc123", "dirty": True, "source": ".gpu-ab/commit"}
    (tmp_path / ".gpu-cd").mkdir()
    (tmp_path / ".gpu-cd" / "commit").write_text("\n")  # empty: not a label
    monkeypatch.setenv("FOLD_ATTENTION_LIBRARY", str(tmp_path / ".gpu-cd" / "libfold_attention.so"))
    assert provenance.git_commit()["commit"] == "unknown"
    # Any other library: git.
    monkeypatch.setenv("FOLD_ATTENTION_LIBRARY", str(tmp_path / "build" / "libfold_attention.so"))
    assert provenance.git_commit() == {"commit": "deadbeef", "dirty": False, "source": "git"}

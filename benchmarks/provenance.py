"""Provenance recorded with every result file.

GPU name, clocks, driver, CUDA, cuDNN, torch, Triton and every baseline library's
version, the project's commit and the command. Nothing machine-identifying: no
host name, no GPU UUID or bus id, no absolute path (sanitize() scrubs them from
every string that goes into a result file).
"""
from __future__ import annotations

import importlib
import os
import platform
import re
import socket
import subprocess
import sys
from typing import Any, Dict, List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_UUID_RE = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F-]{8,}\b|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                      r"[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_BUS_RE = re.compile(r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]\b")
# an absolute path: a slash-led run of path characters with at least two parts
_ABS_PATH_RE = re.compile(r"(?<![\w.:/-])(?:~|/)(?:[\w.+@-]+/)+[\w.+@-]*")
_IPV4_RE = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def _host_names() -> List[str]:
    names = set()
    try:
        names.add(socket.gethostname())
        names.add(socket.getfqdn())
    except Exception:
        pass
    try:
        names.add(platform.node())
    except Exception:
        pass
    return sorted((n for n in names if n and n not in ("localhost", "localhost.localdomain")),
                  key=len, reverse=True)


def _scrub_path(m: "re.Match[str]") -> str:
    p = m.group(0)
    rel = None
    root = REPO_ROOT.rstrip("/") + "/"
    if p.startswith(root):
        rel = p[len(root):]
    base = rel if rel is not None else "<path>/" + os.path.basename(p.rstrip("/"))
    return base


def sanitize(value: Any, extra_secrets: Optional[List[str]] = None) -> Any:
    """Recursively remove host names, UUIDs, bus ids, IPs and absolute paths."""
    if isinstance(value, str):
        s = value
        for secret in list(extra_secrets or []) + _host_names():
            if secret and len(secret) >= 3:
                s = s.replace(secret, "<host>")
        s = _UUID_RE.sub("<uuid>", s)
        s = _BUS_RE.sub("<bus>", s)
        s = _IPV4_RE.sub("<ip>", s)
        s = _ABS_PATH_RE.sub(_scrub_path, s)
        return s
    if isinstance(value, dict):
        return {sanitize(k, extra_secrets) if isinstance(k, str) else k: sanitize(v, extra_secrets)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v, extra_secrets) for v in value]
    return value


def _run(cmd: List[str], timeout: float = 10.0) -> Optional[str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
        if r.returncode == 0:
            return r.stdout.strip()
    except Exception:
        pass
    return None


def _commit_file(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as f:
            lines = [x.strip() for x in f if x.strip()]
    except OSError:  # missing, a directory, unreadable
        return None
    if not lines:
        return None
    return {"commit": lines[0], "dirty": any("dirty" in x for x in lines[1:])}


def git_commit() -> Dict[str, Any]:
    # The library under test comes from a GPU bundle (scripts/build_gpu_bundle.sh) on a GPU
    # machine, whose copy of the tree may carry a stale .git: the bundle records the commit it
    # was built at, and that is the one that identifies the code measured. A library in a
    # folder of the repository whose name starts with .gpu (.gpu/, or the .gpu-*/ folders of
    # an A/B run) is labelled by the `commit` file beside it, never by git ("unknown" without
    # one); any other library by git, then by .gpu/commit.
    unknown = {"commit": "unknown", "dirty": None, "source": None}
    lib = os.environ.get("FOLD_ATTENTION_LIBRARY", "")
    if lib:
        lib_dir = os.path.dirname(os.path.abspath(lib))
        rel = os.path.relpath(lib_dir, REPO_ROOT)
        if not rel.startswith("..") and rel.split(os.sep)[0].startswith(".gpu"):
            found = _commit_file(os.path.join(lib_dir, "commit"))
            return {**found, "source": rel.replace(os.sep, "/") + "/commit"} if found else unknown
    head = _run(["git", "rev-parse", "HEAD"])
    if head:
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
        return {"commit": head, "dirty": bool(status) if status is not None else None, "source": "git"}
    found = _commit_file(os.path.join(REPO_ROOT, ".gpu", "commit"))
    return {**found, "source": ".gpu/commit"} if found else unknown


def module_version(name: str) -> str:
    if name == "fold_attention":
        try:
            from .arms.fold import import_fold
            import_fold()   # from the installed package or from python/ in the repo
        except Exception as e:
            return str(e)[:200]
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # any import failure is a fact worth recording
        return f"unavailable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    v = getattr(mod, "__version__", None)
    if v is None:
        try:
            from importlib.metadata import version
            v = version(name.replace("_", "-"))
        except Exception:
            v = "unknown"
    return str(v)


def gpu_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {}
    try:
        import torch
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(name=p.name, sm=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                        memory_gib=round(p.total_memory / 2**30, 1),
                        l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1))
    except Exception as e:
        info["error"] = str(e)[:200]
    fields = {"driver": "driver_version", "clock_sm_mhz": "clocks.sm", "clock_mem_mhz": "clocks.mem",
              "clock_max_sm_mhz": "clocks.max.sm", "clock_max_mem_mhz": "clocks.max.mem",
              "clock_app_sm_mhz": "clocks.applications.graphics", "power_limit_w": "power.limit",
              "persistence_mode": "persistence_mode", "compute_mode": "compute_mode",
              "mig_mode": "mig.mode.current"}
    q = _run(["nvidia-smi", "--query-gpu=" + ",".join(fields.values()), "--format=csv,noheader,nounits",
              "-i", "0"])
    if q and len(q.split(",")) == len(fields):
        info.update(dict(zip(fields, (x.strip() for x in q.split(",")))))
    elif q is None or q:
        for key, fld in fields.items():   # one at a time: an unknown field fails the whole query
            v = _run(["nvidia-smi", f"--query-gpu={fld}", "--format=csv,noheader,nounits", "-i", "0"])
            if v:
                info[key] = v.splitlines()[0].strip()
    return info


def collect(config: Optional[Dict[str, Any]] = None, argv: Optional[List[str]] = None) -> Dict[str, Any]:
    """Everything recorded with a result file (sanitized)."""
    import torch
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "cudnn": None, "triton": module_version("triton")}
    try:
        versions["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    for lib in ("flashinfer", "flash_attn", "flash_attn_interface", "flash_attn.cute", "fold_attention",
                "numpy"):
        versions[lib] = module_version(lib)
    argv = list(sys.argv if argv is None else argv)
    prov = {
        "gpu": gpu_info(),
        "versions": versions,
        "git": git_commit(),
        "command": "python -m " + _module_name(argv) + (" " + " ".join(argv[1:]) if len(argv) > 1 else ""),
        "env": {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG",
                                            "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT") if k in os.environ},
        "config": config or {},
    }
    return sanitize(prov)


def _module_name(argv: List[str]) -> str:
    if not argv:
        return "?"
    a0 = argv[0]
    rel = os.path.relpath(os.path.abspath(a0), REPO_ROOT) if os.path.isabs(a0) or os.path.exists(a0) else a0
    if rel.endswith(".py"):
        rel = rel[:-3]
    return rel.replace(os.sep, ".")

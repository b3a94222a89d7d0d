"""Real-model captures: post-RoPE Q/K/V of a few layers of a trained model's prefill.

A capture file is a torch.save'd dict (load with weights_only=True):
  {"format": "fold_attention.capture/1",
   "capture_id": 16 hex digits (see capture_hash),
   "meta": {model, text source, n_tokens, n_heads, n_kv_heads, head_dim, rope,
            layers, query_positions, ...},
   "layers": {"<layer>": {"q": (Nq, H, D) bf16 at meta["query_positions"],
                          "k": (S, H_kv, D) bf16, "v": (S, H_kv, D) bf16}}}
K and V cover every position 0..S-1; Q is kept only at query_positions (decode
queries: every 64th position and the last stretch), which keeps a file of three
layers of an 8K-token prefill near 20 MB.

Captures are generated (benchmarks/make_capture.py), never committed; they are
found, in order, under $FOLD_CAPTURE_DIR, <repo>/.cache/captures, and
~/.cache/fold_attention/captures. Result files name a capture by its capture_id.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import Any, Dict, List, Optional

import torch

from .provenance import REPO_ROOT

FORMAT = "fold_attention.capture/1"


def capture_dirs() -> List[str]:
    dirs = []
    env = os.environ.get("FOLD_CAPTURE_DIR")
    if env:
        dirs.append(env)
    dirs.append(os.path.join(REPO_ROOT, ".cache", "captures"))
    dirs.append(os.path.join(os.path.expanduser("~"), ".cache", "fold_attention", "captures"))
    return dirs


def default_dir() -> str:
    return capture_dirs()[0]


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    try:
        return t.numpy().tobytes()
    except Exception:  # torch without numpy: slower, same bytes
        return bytes(t.tolist())


def capture_hash(meta: Dict[str, Any], layers: Dict[str, Dict[str, torch.Tensor]]) -> str:
    """sha256 over the canonical metadata and every tensor's dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    for lname in sorted(layers, key=lambda s: int(s) if str(s).isdigit() else str(s)):
        for key in ("q", "k", "v"):
            t = layers[lname][key]
            h.update(f"{lname}/{key}/{t.dtype}/{tuple(t.shape)}".encode())
            h.update(_tensor_bytes(t))
    return h.hexdigest()[:16]


def save_capture(meta: Dict[str, Any], layers: Dict[Any, Dict[str, torch.Tensor]], directory: Optional[str] = None,
                 stem: str = "capture") -> str:
    layers = {str(k): {n: t.detach().contiguous().cpu() for n, t in v.items()} for k, v in layers.items()}
    cid = capture_hash(meta, layers)
    directory = directory or default_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{stem}-{cid}.pt")
    tmp = path + ".tmp"
    torch.save({"format": FORMAT, "capture_id": cid, "meta": meta, "layers": layers}, tmp)
    os.replace(tmp, path)
    return path


class Capture:
    def __init__(self, path: str, verify: bool = True):
        d = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"{os.path.basename(path)}: not a {FORMAT} file")
        self.meta: Dict[str, Any] = d["meta"]
        self.layers: Dict[str, Dict[str, torch.Tensor]] = d["layers"]
        self.capture_id: str = d["capture_id"]
        self.name = os.path.basename(path)
        if verify:
            got = capture_hash(self.meta, self.layers)
            if got != self.capture_id:
                raise ValueError(f"{self.name}: hash {got} != stored {self.capture_id}")

    @property
    def layer_ids(self) -> List[str]:
        return sorted(self.layers, key=lambda s: int(s) if s.isdigit() else s)

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])

    @property
    def query_positions(self) -> List[int]:
        return list(self.meta["query_positions"])

    def q_at(self, layer: str, pos: int) -> torch.Tensor:
        """Q (H, D) of the token at position pos (must be a stored query position)."""
        idx = self.query_positions.index(pos)
        return self.layers[layer]["q"][idx]

    def kv(self, layer: str, length: int):
        """K, V (length, H_kv, D) of positions 0..length-1."""
        L = self.layers[layer]
        return L["k"][:length], L["v"][:length]

    def summary(self) -> Dict[str, Any]:
        m = self.meta
        return {"capture_id": self.capture_id, "model": m.get("model"), "text": m.get("text", {}).get("source"),
                "n_tokens": self.n_tokens, "layers": self.layer_ids, "heads": m.get("n_heads"),
                "kv_heads": m.get("n_kv_heads"), "head_dim": m.get("head_dim")}


def find_captures() -> List[str]:
    seen, out = set(), []
    for d in capture_dirs():
        for p in sorted(glob.glob(os.path.join(d, "*.pt"))):
            b = os.path.basename(p)
            if b not in seen:
                seen.add(b)
                out.append(p)
    return out


def load_all(verify: bool = True) -> List[Capture]:
    caps = []
    for p in find_captures():
        try:
            caps.append(Capture(p, verify=verify))
        except Exception:
            continue
    return caps


def synthetic_capture(n_tokens: int = 256, n_heads: int = 3, n_kv_heads: int = 1, head_dim: int = 16,
                      layers=(0, 1), seed: int = 0):
    """A tiny capture-shaped dict (for tests and dry runs; not a model)."""
    g = torch.Generator().manual_seed(seed)
    qpos = sorted(set(list(range(63, n_tokens, 64)) + list(range(max(0, n_tokens - 16), n_tokens))))
    meta = {"model": "synthetic", "text": {"source": "none"}, "n_tokens": n_tokens, "n_heads": n_heads,
            "n_kv_heads": n_kv_heads, "head_dim": head_dim, "layers": list(layers), "query_positions": qpos,
            "dtype": "bfloat16"}
    lay = {}
    for li in layers:
        lay[str(li)] = {
            "q": (torch.randn(len(qpos), n_heads, head_dim, generator=g) * 2).to(torch.bfloat16),
            "k": torch.randn(n_tokens, n_kv_heads, head_dim, generator=g).to(torch.bfloat16),
            "v": torch.randn(n_tokens, n_kv_heads, head_dim, generator=g).to(torch.bfloat16)}
    return meta, lay

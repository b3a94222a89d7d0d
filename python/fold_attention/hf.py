"""Hugging Face transformers integration: ``attn_implementation="fold"``.

    import fold_attention.hf
    fold_attention.hf.register()          # once; idempotent
    model = AutoModelForCausalLM.from_config(config, attn_implementation="fold")

Training and prefill (queries and keys of equal length) run through fold_attn_func /
fold_attn_varlen_func, so the backward is FoldAttention's deterministic one:
- no padding: one dense call (causal as the module says);
- padding-free packed batches (``DataCollatorWithFlattening``): the ``cu_seq_lens_q``
  keyword transformers passes, or position ids that restart at 0, become ``cu_seqlens``;
- a 2-D padding mask: the real tokens are gathered into a packed batch and scattered back.
Sliding-window layers (Mistral, Qwen2, Gemma, ...) pass transformers' ``sliding_window`` on as
``window_size=(sliding_window - 1, sliding_window - 1)``, as transformers does for
FlashAttention (the CPU reference and the CUDA kernels apply any window). gpt-oss's attention
sinks (``s_aux``) pass on as ``sinks`` (the CPU reference and the CUDA kernels). Generation
through FoldKVCache takes both, on CPU and CUDA caches. Attention
dropout and soft-capping are not supported and raise, as does a padding mask on cross-attention
(the mask is the keys', the queries are other tokens).
Generation goes through FoldKVCache: `generate` (or passing ``fold_caches=FoldLayerCaches(...)``
to the model's forward, with ``use_cache=False``) prefills one FoldKVCache per layer and
then attends each new token with fold_attn_with_kvcache; the caches take unpadded prompts
of causal decoders (a padding mask with them raises). ``pin_windows=True`` (to generate or
FoldLayerCaches) pins each sliding layer's cache to its window, with a pool of a few pages.
"""

from __future__ import annotations

import torch

from .decode import FoldKVCache, fold_attn_with_kvcache
from ._validate import require_flag, require_int
from .training import fold_attn_func, fold_attn_varlen_func

NAME = "fold"
__all__ = ["NAME", "register", "fold_attention_forward", "fold_attention_mask", "FoldLayerCaches",
           "generate"]


def _require_transformers():
    try:
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'fold_attention.hf needs transformers: pip install "fold-attention[hf]"'
        ) from exc


def fold_attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                        mask_function=None, attention_mask=None, **kwargs):
    """Mask function for ``attn_implementation="fold"``.

    Like other un-padded kernels, FoldAttention takes causality as a flag and sequence
    boundaries as offsets, so no dense mask is built: this returns None when there is no
    padding, else the boolean 2-D padding mask (batch, kv_length).
    """
    if attention_mask is None:
        return None
    attention_mask = attention_mask[:, -kv_length:].bool()
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _cu_from_position_ids(position_ids: torch.Tensor, device) -> torch.Tensor | None:
    """Offsets of the sequences packed in one row whose positions restart at 0."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    pos = position_ids[0]
    starts = torch.nonzero(pos == 0).flatten()
    if starts.numel() <= 1 or int(starts[0]) != 0:
        return None
    total = torch.tensor([pos.numel()], device=starts.device)
    return torch.cat([starts, total]).to(device=device, dtype=torch.int32)


def _may_be_cross_attention(module, causal: bool) -> bool:
    """Whether a module may attend other tokens than its queries', so that a padding mask (the
    keys') says nothing about its queries. transformers marks this in several ways: a flag
    (BERT-style `is_cross_attention`, on the module or not at all), a decoder's non-causal
    attention (Bart / T5 / Whisper: `is_decoder` and not causal), or only the class name
    (BertCrossAttention and its copies, T5GemmaCrossAttention, MllamaTextCrossAttention, ...).
    Causal attention is always self-attention here (the keys are the queries' own tokens)."""
    if causal:
        return False
    return (bool(getattr(module, "is_cross_attention", False)) or bool(getattr(module, "is_decoder", False))
            or "cross" in type(module).__name__.lower())


def _window_size(sliding_window) -> tuple[int, int]:
    """transformers' sliding_window (a query sees the keys at distance < sliding_window, its
    own included) as window_size, the mapping transformers uses for FlashAttention."""
    if sliding_window is None:
        return (-1, -1)
    w = require_int(sliding_window, "sliding_window", "attn_implementation='fold'", minimum=1)
    return (w - 1, w - 1)


def fold_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           sliding_window=None, softcap=None, is_causal=None, s_aux=None,
                           **kwargs):
    """AttentionInterface function: (B, H, S, D) tensors in, ((B, S, H, D), None) out."""
    if dropout:
        raise NotImplementedError("attn_implementation='fold': attention dropout is not supported")
    if softcap is not None:
        raise NotImplementedError("attn_implementation='fold': soft-capping is not supported")
    window = _window_size(sliding_window)
    sinks = s_aux  # gpt-oss's per-head sink logits (None elsewhere)
    if kwargs.get("output_attentions", False):
        raise NotImplementedError("attn_implementation='fold' does not return attention weights")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # (B, S, H, D)
    caches = kwargs.get("fold_caches")
    if caches is not None:
        # The caches hold each request's tokens from position 0 and attend causally: a padding
        # mask (left padding, holes) or a bidirectional module would be ignored, silently.
        if attention_mask is not None:
            raise NotImplementedError(
                "attn_implementation='fold' with fold_caches: padded batches are not supported "
                "(every row's prompt must be all real tokens; the padding mask would be ignored)"
            )
        if not causal:
            raise NotImplementedError(
                "attn_implementation='fold' with fold_caches: only causal (decoder) attention "
                "goes through FoldKVCache"
            )
        return caches.attend(module, q, k, v, scaling, window, sinks), None
    batch, q_len = q.shape[0], q.shape[1]
    if k.shape[1] != q_len:
        raise NotImplementedError(
            "attn_implementation='fold' runs training and prefill (as many queries as keys); "
            "decode with a cache goes through fold_attention.FoldKVCache"
        )
    dtype = q.dtype

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None and batch == 1 and attention_mask is None:
        cu = _cu_from_position_ids(kwargs.get("position_ids"), q.device)
    if cu is not None:
        if batch != 1:
            raise ValueError("attn_implementation='fold': packed sequences need batch size 1")
        cu = cu.to(device=q.device, dtype=torch.int32)
        out = fold_attn_varlen_func(q[0], k[0], v[0], cu, max_seqlen=kwargs.get("max_length_q"),
                                    causal=causal, softmax_scale=scaling, window_size=window,
                                    sinks=sinks)
        return out.unsqueeze(0).to(dtype), None

    if attention_mask is None:
        return fold_attn_func(q, k, v, causal=causal, softmax_scale=scaling,
                              window_size=window, sinks=sinks), None

    # Padding: gather the real tokens of each row into a packed batch, then scatter back. That
    # packs the queries by the keys' mask: right for self-attention only.
    if _may_be_cross_attention(module, causal):
        raise NotImplementedError(
            "attn_implementation='fold': a padding mask on cross-attention (or on a decoder's "
            "non-causal attention) is not supported (the mask is the keys'; fold packs queries "
            "and keys by the same offsets)"
        )
    mask = attention_mask.bool()
    if mask.dim() != 2 or tuple(mask.shape) != (batch, q_len):
        raise ValueError(
            f"attn_implementation='fold': expected a 2-D padding mask of shape {(batch, q_len)}, "
            f"got {tuple(mask.shape)}"
        )
    index = torch.nonzero(mask.flatten()).flatten()
    lengths = mask.sum(dim=1, dtype=torch.int32)
    cu = torch.zeros(batch + 1, dtype=torch.int32, device=q.device)
    cu[1:] = torch.cumsum(lengths, 0)

    def pack(x):
        return x.reshape(batch * q_len, *x.shape[2:]).index_select(0, index)

    packed = fold_attn_varlen_func(pack(q), pack(k), pack(v), cu, causal=causal,
                                   softmax_scale=scaling, window_size=window, sinks=sinks)
    out = q.new_zeros((batch * q_len,) + tuple(packed.shape[1:]))
    out = out.index_copy(0, index, packed)
    return out.reshape(batch, q_len, *packed.shape[1:]), None


_registered = False


def register(name: str = NAME) -> str:
    """Registers the attention and mask functions under ``name`` (default "fold")."""
    global _registered
    _require_transformers()
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, fold_attention_forward)
    AttentionMaskInterface.register(name, fold_attention_mask)
    _registered = True
    return name


class FoldLayerCaches:
    """One FoldKVCache per attention layer of a transformers model, for generation.

    A forward with more than one token prefills (all requests with the same prompt length);
    a forward with one token appends it and attends over each layer's cache.

    pin_windows: each sliding-window layer's cache is pinned to its window
    (FoldKVCache(window_size=...)): a request keeps only its window's pages, from a pool of
    window_num_pages pages (default: batch x (2 ceil(window / page_size) + 2), what prefill's
    chunks and the steps can hold at once). The caches are then made at each layer's first
    forward, when its window is known (``layers[i]`` is None until then), on ``device`` as the
    other layers' (CPU or CUDA; FoldKVCache's window_size). cache_kwargs go to every layer's
    FoldKVCache.
    """

    def __init__(self, config, batch, max_len, depth=16, v8=False, dtype=torch.bfloat16,
                 device="cpu", pin_windows=False, window_num_pages=None, **cache_kwargs):
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.dtype = dtype
        self.max_len = max_len
        self.pin_windows = require_flag(pin_windows, "pin_windows", "FoldLayerCaches")
        if window_num_pages is not None:
            window_num_pages = require_int(window_num_pages, "window_num_pages", "FoldLayerCaches",
                                           minimum=1)
        self.window_num_pages = window_num_pages
        self._args = (batch, config.num_attention_heads, config.num_key_value_heads, head_dim, max_len)
        self._kwargs = dict(depth=depth, v8=v8, dtype=dtype, device=device, **cache_kwargs)
        self.layers = [None if self.pin_windows else FoldKVCache(*self._args, **self._kwargs)
                       for _ in range(config.num_hidden_layers)]

    def _layer(self, idx: int, window_size) -> FoldKVCache:
        """Layer idx's cache; with pin_windows, made at its first forward (pinned to its window
        if it has one)."""
        cache = self.layers[idx]
        if cache is None:
            kw = dict(self._kwargs)
            if 0 <= window_size[0] and window_size[0] + 1 < self.max_len:  # (a window that hides keys)
                kw["window_size"] = window_size
                page = kw.get("page_size", 256)
                w = -(-(window_size[0] + 1) // page)
                kw["num_pages"] = self.window_num_pages or min(
                    self._args[0] * (2 * w + 2), self._args[0] * -(-self.max_len // page))
            cache = self.layers[idx] = FoldKVCache(*self._args, **kw)
        return cache

    def attend(self, module, q, k, v, scaling, window_size=(-1, -1), sinks=None):
        """q (B, S, H, D), k/v (B, S, Hkv, D) of one layer's new tokens -> (B, S, H, D), with
        the layer's sliding window and attention sinks (prefill and steps alike)."""
        cache = self._layer(module.layer_idx, window_size)
        if scaling is not None and abs(scaling - cache.softmax_scale) > 1e-6 * cache.softmax_scale:
            raise ValueError(f"FoldLayerCaches: the layer's scaling {scaling} differs from the "
                             f"cache's softmax_scale {cache.softmax_scale}")
        dtype = q.dtype
        q, k, v = (x.to(self.dtype) for x in (q, k, v))
        batch, seq = q.shape[0], q.shape[1]
        if seq == 1:
            out = fold_attn_with_kvcache(q[:, 0], cache, k[:, 0], v[:, 0], window_size=window_size,
                                         sinks=sinks).unsqueeze(1)
        else:
            cu = torch.arange(0, (batch + 1) * seq, seq, dtype=torch.int32, device="cpu")
            flat = (x.reshape(batch * seq, *x.shape[2:]) for x in (q, k, v))
            out = cache.prefill(*flat, cu, window_size=window_size, sinks=sinks)
            out = out.reshape(batch, seq, *q.shape[2:])
        return out.to(dtype)

    def stats(self) -> dict:
        """Mean over layers of each FoldKVCache's last-step statistics."""
        rows = [c.stats() for c in self.layers if c is not None]
        keys = ("live_frac", "refine_frac", "v_refine_frac", "bytes_per_key")
        return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


@torch.no_grad()
def generate(model, input_ids, max_new_tokens, depth=16, v8=False, forced=None, **cache_kwargs):
    """Greedy generation through FoldKVCache (one per layer).

    Returns (tokens (B, max_new_tokens), logits (B, max_new_tokens, vocab) of each step,
    stats of the last step). With ``forced`` (B, max_new_tokens) the given tokens are fed
    instead of the argmax (teacher forcing), to compare two configurations step by step.
    """
    fn = "fold_attention.hf.generate"
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"{fn}: input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
    if input_ids.dim() != 2 or input_ids.shape[0] < 1 or input_ids.shape[1] < 1:
        raise ValueError(f"{fn}: input_ids must be (batch >= 1, prompt >= 1), got {tuple(input_ids.shape)}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{fn}: input_ids must hold token ids (int64 or int32), got {input_ids.dtype}")
    max_new_tokens = require_int(max_new_tokens, "max_new_tokens", fn, minimum=1)
    if forced is not None:
        if not isinstance(forced, torch.Tensor):
            raise TypeError(f"{fn}: forced must be a torch.Tensor or None, got {type(forced).__name__}")
        want = (input_ids.shape[0], max_new_tokens)
        if tuple(forced.shape) != want:
            raise ValueError(f"{fn}: forced must have shape (batch, max_new_tokens) = {want}, "
                             f"got {tuple(forced.shape)}")
        if forced.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{fn}: forced must hold token ids (int64 or int32), got {forced.dtype}")
        vocab = getattr(model.config, "vocab_size", None)
        if forced.numel() and (int(forced.min()) < 0 or (vocab is not None and int(forced.max()) >= vocab)):
            raise ValueError(f"{fn}: forced holds token ids outside [0, vocab_size = {vocab})")
    register()
    previous = model.config._attn_implementation
    model.config._attn_implementation = NAME
    try:
        return _generate(model, input_ids, max_new_tokens, depth, v8, forced, **cache_kwargs)
    finally:
        model.config._attn_implementation = previous  # the caller's model is left as it was


def _generate(model, input_ids, max_new_tokens, depth, v8, forced, **cache_kwargs):
    batch, prompt = input_ids.shape
    caches = FoldLayerCaches(model.config, batch, prompt + max_new_tokens, depth=depth, v8=v8,
                             device=input_ids.device, **cache_kwargs)
    positions = torch.arange(prompt, device=input_ids.device).expand(batch, prompt)
    logits = model(input_ids, position_ids=positions, use_cache=False,
                   fold_caches=caches).logits[:, -1].float()
    tokens, step_logits = [], []
    for i in range(max_new_tokens):
        step_logits.append(logits)
        nxt = logits.argmax(-1) if forced is None else forced[:, i]
        tokens.append(nxt)
        if i + 1 == max_new_tokens:
            break
        pos = torch.full((batch, 1), prompt + i, device=input_ids.device)
        logits = model(nxt[:, None], position_ids=pos, use_cache=False,
                       fold_caches=caches).logits[:, -1].float()
    return torch.stack(tokens, 1), torch.stack(step_logits, 1), caches.stats()

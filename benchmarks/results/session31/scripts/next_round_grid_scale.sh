#!/usr/bin/env bash
# Prepared in session 31, NOT RUN (about 3 minutes of device time): the backward grid's s clamped at
# 126 instead of 100 (patches/backward-grid-scale-s126-prepared.patch, `git am` on main). Why: with V
# ~ 1e-33 (normal floats) b_dq ~ 2^-109 wants s ~ 138, and at 2^100 every dQ partial rounded to
# 0: dQ came out 0 where SDPA gives 1.7e-33 (session 31's input audit; notes/training_kernels.md
# "Session 31"). The bits change only where s exceeded 100 (b_dq < 2^-71); the kernels apply
# 2^(s - t) in two multiplies where it leaves the normal range, and 2^-s stays normal.
# Libraries: gs1 (built from the patch) and main, carried as .ab/gs1.so.xz / .ab/main.so.xz with
# their .commit files (notes/prepared/README.md, "Rebuilding").
# Checks: the training GPU tests, gradient hashes equal to main's (ordinary inputs), and the tiny-V
# case on the GPU against SDPA (dQ and dK relative error).
#   OUT=$OUT bash benchmarks/results/session31/scripts/next_round_grid_scale.sh
set -u
cd "$(dirname "$0")/../../../.."
source notes/prepared/round_common.sh gs1 main
X=$(L gs1); M=$(L main)
chk training_tests 300 env FOLD_ATTENTION_LIBRARY=$X python3 -m pytest -q -m gpu -p no:logging \
  tests/python/test_gpu_training.py tests/python/test_gpu_preprocess.py tests/python/test_gpu_kv_bounds.py
for n in gs1 main; do
  step grad_$n 200 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 scripts/grad_hashes.py
  cp "$LOGS/grad_$n.log" "$OUT/grad_$n.txt"
done
if cmp -s "$OUT/grad_gs1.txt" "$OUT/grad_main.txt"; then
  echo "== grad hashes gs1 = main: same" >> "$OUT/summary.txt"
else
  echo "== grad hashes gs1 = main: DIFFER" >> "$OUT/summary.txt"; fail=1
fi
cat > "$LOGS/tiny.py" <<'PY'
import torch, fold_attention as fa
for s in (1e-30, 1e-33):
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        q = torch.randn(2, 256, 8, 128, device="cuda").to(dtype).requires_grad_()
        k = torch.randn(2, 256, 2, 128, device="cuda").to(dtype).requires_grad_()
        v = (torch.randn(2, 256, 2, 128, device="cuda") * s).to(dtype)
        g = torch.randn(2, 256, 8, 128, device="cuda").to(dtype)
        fa.fold_attn_func(q, k, v, causal=True).backward(g)
        q2, k2 = (x.detach().double().requires_grad_() for x in (q, k))
        ref = torch.nn.functional.scaled_dot_product_attention(
            q2.transpose(1, 2), k2.transpose(1, 2).repeat_interleave(4, 1),
            v.double().transpose(1, 2).repeat_interleave(4, 1), is_causal=True).transpose(1, 2)
        ref.backward(g.double())
        e = lambda a, b: ((a.double() - b).norm() / b.norm()).item()
        print(f"V x {s:g} {dtype}: dq rel err {e(q.grad, q2.grad):.3g}, dk rel err {e(k.grad, k2.grad):.3g}")
PY
for n in gs1 main; do
  step tiny_$n 120 env FOLD_ATTENTION_LIBRARY=$(L $n) python3 "$LOGS/tiny.py"
done
echo "== grid-scale round checks failed: $fail" >> "$OUT/summary.txt"
grep -v "^\.\.\." "$OUT/summary.txt" | tail -40

// A training step from C++ through the C ABI, no Python: forward, then the deterministic
// backward twice, checking that the gradients are bit-identical. fp32 data on the CPU
// reference backend (the CUDA entry points take device pointers and a cudaStream_t).
#include <fold_attention/fold_attention.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

int main() {
  const int batch = 2, seqlen = 96, heads = 4, kv_heads = 2, dim = 64;
  const int64_t tokens = static_cast<int64_t>(batch) * seqlen;
  fold_attn_problem_t p{};
  p.batch = batch;
  p.seqlen = seqlen;
  p.cu_seqlens = nullptr;  // dense [batch, seqlen, heads, dim]
  p.total_tokens = tokens;
  p.n_heads = heads;
  p.n_kv_heads = kv_heads;
  p.head_dim = dim;
  p.dtype = FOLD_DTYPE_F32;
  p.causal = 1;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(dim));

  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  auto tensor = [&](int h) {
    std::vector<float> x(static_cast<size_t>(tokens) * h * dim);
    for (float &e : x) e = normal(rng);
    return x;
  };
  auto view = [&](std::vector<float> &x, int h) {
    return fold_tensor_t{x.data(), static_cast<int64_t>(seqlen) * h * dim,
                         static_cast<int64_t>(h) * dim, dim};
  };
  std::vector<float> q = tensor(heads), k = tensor(kv_heads), v = tensor(kv_heads);
  std::vector<float> dout = tensor(heads), out(q.size()), lse(static_cast<size_t>(heads) * tokens);

  if (fold_fwd_cpu(&p, view(q, heads), view(k, kv_heads), view(v, kv_heads), view(out, heads),
                   lse.data()) != FOLD_OK) {
    std::fprintf(stderr, "forward failed: %s\n", fold_last_error());
    return 1;
  }
  std::vector<float> grads[2][3];
  for (auto &run : grads) {
    run[0].resize(q.size());
    run[1].resize(k.size());
    run[2].resize(v.size());
    if (fold_bwd_cpu(&p, view(q, heads), view(k, kv_heads), view(v, kv_heads), view(out, heads),
                     view(dout, heads), lse.data(), view(run[0], heads), view(run[1], kv_heads),
                     view(run[2], kv_heads)) != FOLD_OK) {
      std::fprintf(stderr, "backward failed: %s\n", fold_last_error());
      return 1;
    }
  }
  bool same = true;
  for (int g = 0; g < 3; ++g)
    same = same && std::memcmp(grads[0][g].data(), grads[1][g].data(),
                               grads[0][g].size() * sizeof(float)) == 0;
  // A bad call reports a status and a message instead of crashing.
  p.n_heads = 3;
  const fold_status_t bad = fold_fwd_cpu(&p, view(q, heads), view(k, kv_heads), view(v, kv_heads),
                                         view(out, heads), lse.data());
  std::printf("fold_attention %s (CUDA: %d): out[0]=%.6f, backward repeat bit-identical: %s\n",
              fold_version(), fold_built_with_cuda(), out[0], same ? "yes" : "NO");
  std::printf("bad call -> status %d: %s\n", static_cast<int>(bad), fold_last_error());
  return same && bad == FOLD_ERR_INVALID_ARGUMENT ? 0 : 1;
}

// A decode step from C++ through the C ABI, no Python: a paged FoldAttention KV cache of one
// layer (caller-owned arrays), a prompt appended, then one step that appends a token and
// attends at depth 16, compared with the dense step over the same cache. bf16 data on the CPU
// reference backend (the CUDA entry points take device pointers and a cudaStream_t).
#include <fold_attention/decode.h>
#include <fold_attention/fold_attention.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint16_t to_bf16(float x) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

int main() {
  const int heads = 8, kv_heads = 2, dim = 64, page = 128, max_len = 512, prompt = 300;
  const int pages = (max_len + page - 1) / page;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  auto random_bf16 = [&](size_t n, float scale) {
    std::vector<uint16_t> x(n);
    for (auto &e : x) e = to_bf16(scale * normal(rng));
    return x;
  };

  // The cache's arrays (what FoldKVCache allocates with torch in Python).
  const size_t keys = static_cast<size_t>(pages) * kv_heads * page;
  std::vector<int8_t> k_a(keys * dim), k_b(keys * dim);
  std::vector<uint16_t> k_scale(keys), v(keys * dim);
  std::vector<int32_t> v_exp(kv_heads, FOLD_DECODE_V_EXP_UNSET);
  std::vector<float> v_page_sum(static_cast<size_t>(pages) * kv_heads * dim, 0.0f);
  std::vector<int32_t> heavy(kv_heads * FOLD_DECODE_HEAVY_KEYS, -1), table(pages), lengths{0};
  for (int p = 0; p < pages; ++p) table[p] = p;  // one request owns the whole pool here
  fold_kvcache_t cache{};
  cache.batch = 1;
  cache.n_kv_heads = kv_heads;
  cache.head_dim = dim;
  cache.page_size = page;
  cache.max_len = max_len;
  cache.pages_per_request = pages;
  cache.num_pages = pages;
  cache.dtype = FOLD_DTYPE_BF16;
  cache.v8 = 0;
  cache.k_a = k_a.data();
  cache.k_b = k_b.data();
  cache.k_scale = k_scale.data();
  cache.v = v.data();
  cache.v_exp = v_exp.data();
  cache.v_page_sum = v_page_sum.data();
  cache.heavy_keys = heavy.data();
  cache.page_table = table.data();
  cache.lengths = lengths.data();

  // Prefill the cache with a prompt's keys and values.
  std::vector<uint16_t> pk = random_bf16(static_cast<size_t>(prompt) * kv_heads * dim, 1.0f);
  std::vector<uint16_t> pv = random_bf16(pk.size(), 1.0f);
  const fold_tensor_t rows_k{pk.data(), 0, kv_heads * dim, dim},
      rows_v{pv.data(), 0, kv_heads * dim, dim};
  if (fold_kvcache_append_cpu(&cache, 0, prompt, rows_k, rows_v) != FOLD_OK) {
    std::fprintf(stderr, "append failed: %s\n", fold_last_error());
    return 1;
  }

  // One step: append a token and attend at depth 16; then dense over the same cache.
  std::vector<uint16_t> q = random_bf16(static_cast<size_t>(heads) * dim, 3.0f);
  std::vector<uint16_t> sk = random_bf16(static_cast<size_t>(kv_heads) * dim, 1.0f);
  std::vector<uint16_t> sv = random_bf16(sk.size(), 1.0f);
  std::vector<uint16_t> out_cut(q.size()), out_dense(q.size());
  const fold_tensor_t q_view{q.data(), heads * dim, dim, dim};
  const fold_tensor_t k_step{sk.data(), kv_heads * dim, dim, dim},
      v_step{sv.data(), kv_heads * dim, dim, dim};
  const fold_tensor_t none{nullptr, 0, 0, 0};
  fold_decode_params_t params{heads, 1.0f / std::sqrt(static_cast<float>(dim)), 0, 16.0f, 8.0f,
                              10.0f};
  fold_decode_stats_t stats{};
  if (fold_decode_cpu(&cache, &params, q_view, k_step, v_step,
                      fold_tensor_t{out_cut.data(), heads * dim, dim, dim}, nullptr,
                      &stats) != FOLD_OK) {
    std::fprintf(stderr, "decode failed: %s\n", fold_last_error());
    return 1;
  }
  const double live = static_cast<double>(stats.live_keys) / static_cast<double>(stats.keys);
  params.dense = 1;
  if (fold_decode_cpu(&cache, &params, q_view, none, none,
                      fold_tensor_t{out_dense.data(), heads * dim, dim, dim}, nullptr,
                      nullptr) != FOLD_OK) {
    std::fprintf(stderr, "dense decode failed: %s\n", fold_last_error());
    return 1;
  }
  double num = 0, den = 0;
  bool finite = true;
  for (size_t i = 0; i < q.size(); ++i) {
    const double a = from_bf16(out_cut[i]), b = from_bf16(out_dense[i]);
    finite = finite && std::isfinite(a);
    num += (a - b) * (a - b);
    den += b * b;
  }
  const double rel = std::sqrt(num / den);
  std::printf(
      "decode step: %d tokens cached, depth 16 kept %.1f%% of keys live, "
      "relative difference to dense %.2e\n",
      lengths[0], 100.0 * live, rel);
  return finite && lengths[0] == prompt + 1 && rel < 0.05 ? 0 : 1;
}

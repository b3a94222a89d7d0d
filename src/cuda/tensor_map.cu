// Host side of TMA (tensor_map.h): the driver entry point, and maps of the tensor views.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/status.h"
#include "cuda/tensor_map.h"

namespace fold::cuda {

namespace {

// cuTensorMapEncodeTiled's signature (CUDA 12.0 ABI), declared here rather than taken from
// cudaTypedefs.h so that the version we ask the runtime for is the one we call.
using EncodeTiledFn = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                   const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                   const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_fn() {
  // Resolved once (thread-safe static init); no driver call happens at library load.
  static const EncodeTiledFn fn = [] {
    void *ptr = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                             cudaEnableDefault, &query);
    if (err != cudaSuccess || query != cudaDriverEntryPointSuccess || ptr == nullptr)
      fail(FOLD_ERR_CUDA, std::string("cuTensorMapEncodeTiled is not available from the driver: ") +
                              cudaGetErrorString(err));
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

constexpr uint64_t kMaxStride = uint64_t{1} << 40;

}  // namespace

CUtensorMapL2promotion l2_promotion(const char *env_name, CUtensorMapL2promotion fallback) {
  const char *v = std::getenv(env_name);
  if (v == nullptr || v[0] == '\0') return fallback;
  if (std::strcmp(v, "0") == 0) return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  if (std::strcmp(v, "64") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
  if (std::strcmp(v, "128") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  if (std::strcmp(v, "256") == 0) return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  fail(FOLD_ERR_INVALID_ARGUMENT,
       std::string(env_name) + "=" + v + ": expected 0 (no promotion), 64, 128 or 256");
}

CUtensorMap encode_tiled_16bit(const void *base, int rank, const uint64_t *dims,
                               const uint64_t *byte_strides, const uint32_t *box,
                               CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  return encode_tiled(base, CU_TENSOR_MAP_DATA_TYPE_UINT16, rank, dims, byte_strides, box, swizzle,
                      promotion);
}

CUtensorMap encode_tiled(const void *base, CUtensorMapDataType type, int rank, const uint64_t *dims,
                         const uint64_t *byte_strides, const uint32_t *box,
                         CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) fail(FOLD_ERR_INTERNAL, "TMA base not aligned");
  cuuint64_t d[5];
  cuuint64_t s[4];
  cuuint32_t b[5];
  cuuint32_t e[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    e[i] = 1;
    if (i + 1 < rank) s[i] = byte_strides[i];
  }
  CUtensorMap map;
  const CUresult res = encode_fn()(
      &map, type, static_cast<cuuint32_t>(rank), const_cast<void *>(base), d, s, b, e,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS)
    fail(FOLD_ERR_CUDA, "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(res) + ")");
  return map;
}

bool tma_describable(const fold_attn_problem_t &p, const fold_tensor_t &t) {
  (void)p;
  const auto ok = [](int64_t stride) {
    return stride >= 0 && stride % 8 == 0 && static_cast<uint64_t>(stride) * 2 < kMaxStride;
  };
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.token_stride > 0 &&
         ok(t.token_stride) && ok(t.head_stride) && ok(t.batch_stride);
}

ViewMap make_view_map(const fold_attn_problem_t &p, const fold_tensor_t &t, int heads,
                      int box_rows) {
  ViewMap v{};
  const bool dense = p.cu_seqlens == nullptr;
  const uint64_t token_bytes = static_cast<uint64_t>(t.token_stride) * 2;
  const uint64_t tokens =
      dense ? static_cast<uint64_t>(p.seqlen) : static_cast<uint64_t>(p.total_tokens);
  v.head_mul = t.head_stride != 0 ? 1 : 0;
  v.batch_mul = dense && t.batch_stride != 0 ? 1 : 0;
  const uint64_t d_dim = static_cast<uint64_t>(p.head_dim);
  const uint64_t h_dim = v.head_mul ? static_cast<uint64_t>(heads) : 1;
  const uint64_t b_dim = v.batch_mul ? static_cast<uint64_t>(p.batch) : 1;
  // A collapsed dimension's stride is never used (its only coordinate is 0); any valid
  // value will do.
  const uint64_t head_bytes = v.head_mul ? static_cast<uint64_t>(t.head_stride) * 2 : 16;
  const uint64_t batch_bytes = v.batch_mul ? static_cast<uint64_t>(t.batch_stride) * 2 : 16;
  const uint64_t dims[4] = {d_dim, h_dim, tokens, b_dim};
  const uint64_t strides[3] = {head_bytes, token_bytes, batch_bytes};
  const uint32_t box[4] = {64, 1, static_cast<uint32_t>(box_rows), 1};
  // FOLD_TRAIN_L2PROMO (0 / 64 / 128 / 256, read at every call): the training maps' L2 fill
  // granule, for A/B runs; default 256 bytes.
  v.map =
      encode_tiled_16bit(t.data, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                         l2_promotion("FOLD_TRAIN_L2PROMO", CU_TENSOR_MAP_L2_PROMOTION_L2_256B));
  return v;
}

}  // namespace fold::cuda

// Host side of TMA: CUtensorMap encoding for the kernels' tensor views.
//
// The driver's cuTensorMapEncodeTiled is reached through cudaGetDriverEntryPointByVersion
// (the runtime hands out driver entry points): the library links the static CUDA runtime
// and must not link libcuda itself. <cuda.h> is used for its types only.
//
// A fold_tensor_t view [batch][token][head][D] (strides in elements, last dim contiguous)
// becomes a 4-D map, innermost first: (D, heads, tokens, batch) with byte strides
// (head_stride, token_stride, batch_stride) x 2, for 16-bit elements. Varlen views are
// (D, heads, total_tokens, 1). The box is (64, 1, rows, 1): one head, `rows` tokens, one
// 64-element (128-byte) panel of D, written to shared memory with the 128-byte swizzle
// (hopper/wgmma.cuh describes that layout); a D > 64 tile takes D / 64 boxes (D = 96: the
// second box reads columns 64..127, of which 96..127 lie outside dimension 0 and are filled
// with zeros). Elements outside the tensor (tokens past the end of a dense request or of
// the packed tensor) are zero-filled by TMA; tokens of the *next* packed request are not
// outside the tensor, so kernels mask them themselves.
//
// TMA needs a 16-byte aligned base and byte strides that are multiples of 16 below 2^40
// (the C ABI validation already demands 16-byte alignment and strides in multiples of 8
// elements). A stride of 0 (a broadcast view) is not a valid TMA stride: such a dimension is
// encoded with extent 1 and the kernel uses coordinate 0 for it (ViewMap::head_mul /
// batch_mul = 0), which addresses the same bytes. A token stride of 0 cannot be described
// that way (a box spans several tokens): tma_describable() says so, and the caller takes
// another path, decided by this layout property alone.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "fold_attention/fold_attention.h"

namespace fold::cuda {

struct ViewMap {
  CUtensorMap map;    // 64-byte aligned (CUtensorMap's own alignment)
  int32_t head_mul;   // 1, or 0 when head_stride == 0 (broadcast view: use coordinate 0)
  int32_t batch_mul;  // 1, or 0 when the batch dimension is collapsed (varlen, stride 0)
};

// Whether TMA can load tiles of view t (layout only: never depends on the batch's lengths).
bool tma_describable(const fold_attn_problem_t &p, const fold_tensor_t &t);

// The 4-D map of view t with `heads` heads and a (64, 1, box_rows, 1) box, SWIZZLE_128B,
// zero fill. Throws FOLD_ERR_CUDA if the driver rejects it.
ViewMap make_view_map(const fold_attn_problem_t &p, const fold_tensor_t &t, int heads,
                      int box_rows);

// Generic 16-bit tiled map (rank 2..5): dims/box innermost first, byte strides for dims
// 1..rank-1. For other kernels; same rules as above.
CUtensorMap encode_tiled_16bit(
    const void *base, int rank, const uint64_t *dims, const uint64_t *byte_strides,
    const uint32_t *box, CUtensorMapSwizzle swizzle,
    CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B);

// Tiled map of any element type (e.g. INT32 for the backward's dQ grid, the target of TMA
// reduce-adds); encode_tiled_16bit is this with UINT16.
// `promotion`: the L2 fill granule of the map's loads (a TMA load that misses L2 fills it in
// units of this size, which can fetch neighbouring bytes the box does not ask for).
CUtensorMap encode_tiled(const void *base, CUtensorMapDataType type, int rank, const uint64_t *dims,
                         const uint64_t *byte_strides, const uint32_t *box,
                         CUtensorMapSwizzle swizzle,
                         CUtensorMapL2promotion promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B);

// The L2 promotion named by the environment variable `env_name` ("0" none, "64", "128", "256";
// read at every call, for A/B runs), else `fallback`; any other value is refused
// (FOLD_ERR_INVALID_ARGUMENT naming the variable).
CUtensorMapL2promotion l2_promotion(const char *env_name, CUtensorMapL2promotion fallback);

}  // namespace fold::cuda

// Geometry of a (dense or packed) batch of requests, shared by host and device code.
//
// A token's "packed index" is its row in lse/delta: cu_seqlens[b] + i when packed, and
// b * seqlen + i when dense, so dense and varlen calls with equal lengths address the same
// rows the same way (and give the same bits).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "fold_attention/fold_attention.h"

namespace fold {

struct Request {
  int64_t first;  // packed index of the request's first token
  int32_t len;    // tokens
};

// Reads request b. On the device cu_seqlens is clamped to [0, total_tokens] and a
// decreasing pair gives an empty request, so malformed offsets never address memory
// outside the tensors (the host validates them where it can see them).
FOLD_HD Request request_of(const fold_attn_problem_t &p, int b) {
  if (p.cu_seqlens == nullptr) return Request{static_cast<int64_t>(b) * p.seqlen, p.seqlen};
  int64_t lo = p.cu_seqlens[b];
  int64_t hi = p.cu_seqlens[b + 1];
  lo = lo < 0 ? 0 : (lo > p.total_tokens ? p.total_tokens : lo);
  hi = hi < lo ? lo : (hi > p.total_tokens ? p.total_tokens : hi);
  return Request{lo, static_cast<int32_t>(hi - lo)};
}

// Element offset of (request b, token i of that request, head h) in tensor t.
FOLD_HD int64_t element_offset(const fold_attn_problem_t &p, const fold_tensor_t &t, int b,
                               const Request &r, int64_t i, int h) {
  const int64_t row = p.cu_seqlens == nullptr
                          ? static_cast<int64_t>(b) * t.batch_stride + i * t.token_stride
                          : (r.first + i) * t.token_stride;
  return row + static_cast<int64_t>(h) * t.head_stride;
}

}  // namespace fold

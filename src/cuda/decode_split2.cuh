// The screened split with two key halves per thread, for groups of G <= 4 rows (G 5-8: WIDE,
// below; G 9-16: WIDE with two row blocks). Included by decode.cu inside its anonymous namespace,
// after split_item and load_q_fragments.
//
// Why: the screened split_item is instruction-bound (notes/decode.md section 20): 815 warp
// instructions per 64-key chunk, most of them per-warp overhead, and at G <= 4 half of every
// warp's lanes hold padding rows (lane (g, t) owns rows g and g + 8 of an 8-row block). Here a
// step covers 128 keys, two halves of 64: thread (kq, u) holds quarter u of keys kq and kq + 64,
// a warp's two IMMAs cover keys 8 warp .. 8 warp + 7 of both halves, and one exchange between
// lanes g < 4 and g + 4 (shfl.xor 16) gives every lane one row (g mod 4) of one half (g / 4).
// The scalar work (logits, verdicts, exp2, operand rounding) then runs once per 16 keys with
// every lane busy, and the step's overhead is paid once per 128 keys.
//
// Same arithmetic and orders as split_item's screened MMA path, so the same bits: the same
// integer dots (the fine logit's key-plane-A dots are the coarse ones), the same per-(row, key)
// functions, the row sums per 64-key half as split_item's per chunk (quad_sum, warp_tree8) and
// the page flushes in key order, the value product per half with the same k steps into the same
// N slices. Pass 0 only (pass 1 runs split_item).

constexpr int kStep2 = 2 * kChunk;  // keys per step
constexpr int kWS2 = kStep2 + 4;    // row stride (floats) of w
constexpr int kWRow2 = kStep2 + 8;  // operand weight row (16-bit elements)

// SA (split2_plan): plane A of a step in shared memory, filled by cp.async one step ahead,
// instead of the two halves' planes in registers (and the next step's prefetched there), and
// plane B of refined keys loaded where it is used: fewer live registers, so that D 128 can run
// three blocks per SM. Rows of D bytes, unpadded; at D 128 a row is 32 banks wide, so an odd
// key's 16-byte pieces are stored swapped by halves (split2_apiece): the two keys of a
// quarter-warp's 16-byte accesses then fall in disjoint banks. (Rows padded to 192 bytes did the
// same and cost 8 KB: at G 8 three blocks per SM did not fit.)
// Where piece p (16 bytes) of key kq's plane A sits in its row.
__host__ __device__ constexpr int split2_apiece(int D, int kq, int p) {
  return D == 128 ? p ^ ((kq & 1) << 2) : p;
}

// The fixed-size per-split tables, in the dynamic block after the q planes (byte offsets from
// there; they were static __shared__ arrays): key scales, the halves' cache rows, row0, the
// verdict flags, the flushed pages' last keys, the warps' counts, the page starts, the halves'
// plane A / value / plane B pointers. Then the row constants [rows][4] (float4) and w.
constexpr int kS2Halves = kSplitKeys / kChunk;
constexpr int kS2Scale = 0;                                      // uint16_t [kSplitKeys]
constexpr int kS2RowBase = kS2Scale + 2 * kSplitKeys;            // int64_t [kS2Halves]
constexpr int kS2Row0 = kS2RowBase + 8 * kS2Halves;              // int64_t
constexpr int kS2Flag8 = kS2Row0 + 8;                            // unsigned char [4][8]
constexpr int kS2PageLast = kS2Flag8 + 4 * 8;                    // int32_t [kPagesPerSplit]
constexpr int kS2WCount = kS2PageLast + 4 * kPagesPerSplit;      // uint32_t [2 kThreads / 32]
constexpr int kS2NewPage = kS2WCount + 4 * (2 * kThreads / 32);  // uint32_t
constexpr int kS2Ptr = kS2NewPage + 8;                           // pointers [a, v, b][kS2Halves]
constexpr int kS2Fixed = kS2Ptr + 3 * static_cast<int>(sizeof(void *)) * kS2Halves;
static_assert(kS2Scale % 16 == 0, "cp.async of the key scales: 16-byte aligned");
static_assert(kS2RowBase % 8 == 0 && kS2Row0 % 8 == 0 && kS2Flag8 % 8 == 0 && kS2Ptr % 8 == 0,
              "64-bit tables (the flags are read as uint64_t): 8-byte aligned");
static_assert(kS2Fixed % 16 == 0, "the row constants are read as float4: 16-byte aligned");
static_assert(3 * sizeof(void *) * kS2Halves >= 4 * (2 * kThreads / 32),
              "v8's per-warp v-refined counts reuse the pointer table after the step loop");

// pipe: PIPE's second value stage and flag buffer; pair: PAIR's (the second warp group's), with
// its own coarse logits, warp sums and operand weights.
__host__ __device__ inline size_t split2_smem_bytes(int G, int D, bool sa = false,
                                                    bool pipe = false, bool pair = false) {
  const size_t rs = G > 8 ? 16 : 8;  // rows of the row blocks (RB = 2 / 1)
  const size_t two = pipe || pair ? 2u : 1u, two_p = pair ? 2u : 1u;
  return (sa ? static_cast<size_t>(kStep2) * D : 0)        // plane A of a step (SA)
         + two * kStep2 * split2_vrow(D)                   // value stage(s), one row per key
         + (two - 1) * 32u                                 // the second verdict flags
         + static_cast<size_t>(pv_kparts(D)) * rs * D * 4  // N's slices
         + two_p * G * kWS2 * 4                            // coarse logits w
         + two_p * 2 * 3 * 8 * rs * 4                      // warp sums [half][3][warp][rs]
         + two_p * rs * kWRow2 * 2                         // operand weights [rs][kWRow2]
         + rs * 2 * D                                      // q planes (MMA A fragments)
         + (3u + kPagesPerSplit) * G * 4                   // per-row sums, page cuts
         + kS2Fixed                                        // the fixed-size tables
         + rs * 4 * 4;                                     // row constants [rs][4]
}

// A three-way switch read per call: unset is "auto" (-1), "1" forces on (1), "0" off (0).
inline int env_tristate(const char *name) {
  const char *v = std::getenv(name);
  if (v == nullptr) return -1;
  return std::strcmp(v, "1") == 0 ? 1 : (std::strcmp(v, "0") == 0 ? 0 : -1);
}

// Which split2 form a launch takes (split2_plan, from the split grid's blocks per SM; scheduling
// only: every form gives the same bits, test_decode_split2_same_bits and _occupancy_same_bits).
struct Split2Plan {
  bool on = false;    // split2 at all (else split_item, or a ring)
  bool sa = false;    // plane A through shared memory (three blocks per SM at D 128)
  bool four = false;  // four blocks per SM (D 64, G <= 4; 64 registers)
  bool pipe = false;  // the next step's screen and gathers before a step's value product (PIPE)
  bool pair = false;  // two warp groups screening steps 2k and 2k + 1 at once (PAIR)
};

// Measured on the H200 (notes/decode.md section 21, session 13 rounds 1, 3 and 5; split kernel
// µs, depth 16; blocks = splits x KV heads x batch, 132 SMs):
// - G <= 4, D 128: registers (two blocks per SM) win up to 512 blocks (B1 L32K 58.6 against
//   SA's 65.7), SA's three blocks from 1,024 on (B2 L32K 106.8 -> 96.5, B32 L8K 347 -> 288,
//   B128 L4K 692 -> 570). D 64 fits three blocks without SA, which adds nothing there (< 2%).
// - G 5-8 (WIDE, both halves per lane): faster than split_item up to 512 blocks with registers
//   (D 128 B4 L16K H 32/4 63.5 -> 54.0, D 64 B4 L32K H 16/2 55.2 -> 49.7), and from 1,024 on
//   with SA's three blocks (B16 L16K H 32/4 185.2 -> 167.2, D 64 B32 L16K H 16/2 158.4 -> 135.0);
//   with registers there it was 3-12% slower.
// - G <= 4, D 64 (session 37, graphed attend, depth 16, G 3 / 4, synthetic caches and the
//   SmolLM2 capture): four blocks per SM with SA against the three of the register form, 0.88-0.92
//   from 1,536 blocks on (B32 L8K H 9/3 85.0 -> 77.6 us, B128 L4K 150.3 -> 134.1, B64 L4K H 16/4
//   114.4 -> 100.6; the capture B32 L8K 73.0 -> 66.9), but 1.03-1.05 at 384 and 768 blocks (B8
//   L8K, B64 L2K: the extra block per SM gathers the grid on fewer SMs or leaves a thinner last
//   wave) and flat at B1: so where the grid holds more than eight blocks per SM.
// FOLD_DECODE_SPLIT2=0 turns split2 off; FOLD_DECODE_SPLIT2_SA and FOLD_DECODE_SPLIT2_WIDE
// force a form on ("1") or off ("0") for A/B runs and the bit test (SA=0 also keeps D 64 at
// three blocks per SM, while SA=1 there still takes four above the threshold; any
// FOLD_DECODE_SPLIT2_OCC, split2_kernel_dt, forces a block count and turns the threshold off).
// blocks: the split grid's (splits x KV heads x batch), sms: the device's SM count. Scheduling
// only: every form gives the same bits (test_decode_split2_same_bits and _occupancy_same_bits).
inline Split2Plan split2_plan(const DecodeCache &c, const fold_decode_params_t &p, int64_t blocks,
                              int sms) {
  Split2Plan plan;
  const char *v = std::getenv("FOLD_DECODE_SPLIT2");
  if (v != nullptr && std::strcmp(v, "0") == 0) return plan;
  if (p.dense != 0 || (c.head_dim != 64 && c.head_dim != 128)) return plan;
  // v8 caches: FOLD_DECODE_V8_SPLIT2=0 (read per call) keeps split_item's fma value product, for
  // A/B runs and the tests (its sums are the CPU reference's, bit for bit).
  if (c.v8 != 0 && env_tristate("FOLD_DECODE_V8_SPLIT2") == 0) return plan;
  const int G = p.n_heads / c.n_kv_heads;
  if (G > 16) return plan;
  if (G > 4 && env_tristate("FOLD_DECODE_SPLIT2_WIDE") == 0) return plan;
  if (G > 8 && env_tristate("FOLD_DECODE_SPLIT2_G16") == 0) return plan;
  plan.on = true;
  const int sa = env_tristate("FOLD_DECODE_SPLIT2_SA");
  const bool big = blocks > 4 * static_cast<int64_t>(sms);
  // (Two row blocks, G 9-16: registers only, two blocks per SM.)
  plan.sa = G <= 8 && (sa == 1 || (sa == -1 && big && (G > 4 || c.head_dim == 128)));
  if (c.head_dim == 64 && G <= 4 && sa != 0 && std::getenv("FOLD_DECODE_SPLIT2_OCC") == nullptr &&
      blocks > 8 * static_cast<int64_t>(sms)) {
    plan.sa = true;
    plan.four = true;
  }
  // PIPE: where the grid is at most one block per SM (the B1 steps: no other block hides a
  // block's chain of steps), one block per SM without a register bound, both stage buffers in
  // shared memory; not with SA (its plane B is loaded where the weights use it) nor in windowed
  // steps (the launcher: their instances stay as they are). FOLD_DECODE_SPLIT2_PIPE=1 / 0 (read
  // per call) forces it on (where the form allows it) / off, for A/B runs and the bit test; a
  // forced block count (FOLD_DECODE_SPLIT2_OCC) turns the default off, so that it runs the
  // instance it names. Scheduling only: the same bits.
  const int pipe = env_tristate("FOLD_DECODE_SPLIT2_PIPE");
  plan.pipe = !plan.sa && (pipe == 1 || (pipe == -1 && blocks <= sms &&
                                         std::getenv("FOLD_DECODE_SPLIT2_OCC") == nullptr));
  // PAIR (split2_item): blocks of two warp groups, one block per SM, the register form; the
  // default where PIPE's is (a grid of at most one block per SM), in its place: session 52 (H100,
  // graphed B1 attends, depth 16) -1.1 to -1.6 us against PIPE at D 64 L 512-8K, -0.75 at D 128
  // L4K; on larger grids (forced) +11-12%, where two 256-thread blocks per SM hide each other.
  // FOLD_DECODE_SPLIT2_PAIR=1 / 0 (read per call) forces it on / off (off: PIPE's default; a
  // forced PAIR on a windowed step, which keeps its own instances, also drops SA there).
  // Scheduling only: the same bits.
  const int pair = env_tristate("FOLD_DECODE_SPLIT2_PAIR");
  if (pair == 1 || (pair == -1 && plan.pipe && pipe == -1)) {
    plan.pair = true;
    plan.sa = plan.four = plan.pipe = false;
  }
  return plan;
}

// The integer dots of row block rb's q planes against both halves' keys k[0], k[1] (plane A or B),
// into the lane's slots. G <= 4: the exchange, lanes g < 4 keep half 0's, lanes g >= 4 take half
// 1's from lane - 16 (same t, row g - 4). WIDE: both kept, slot h = half h.
template <int NP, bool WIDE>
__device__ __forceinline__ void split2_dots(const uint4 *qfrag, int rb, int lane, int hs,
                                            const int4 (&k)[2][NP],
                                            int32_t (&out)[WIDE ? 2 : 1][4]) {
  int32_t c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
  coarse_dots<NP>(qfrag, rb, lane, k[0], c0);
  coarse_dots<NP>(qfrag, rb, lane, k[1], c1);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (WIDE) {
      out[0][i] = c0[i];
      out[1][i] = c1[i];
    } else {
      const int32_t x = __shfl_xor_sync(0xffffffffu, c1[i], 16);
      out[0][i] = hs == 0 ? c0[i] : x;
    }
  }
}

// key_weight (decode_split_parts.cuh) with one exponential per (row, key). A live key's weight is
// exp2_fp(sub_rn(ell, Z)), ell the fine logit when refined else s_A, and a cut key's mass is
// exp2_fp(sub_rn(s_A, Z)): the same function of the same kind of operand, s_A where not refined
// (refined keys are live). So one exp2 of the selected logit, then selects route it to the
// live key's pex / pw or to the cut mass: bit for bit key_weight's results, where a warp with
// both live and cut keys ran key_weight's two bodies one after the other. exp2_fp_sel: exp2_fp's
// bits without its two range branches.
__device__ __forceinline__ KeyWeight split2_key_weight(bool live, bool refined, const int32_t *ca,
                                                       const int32_t *cb, int j, float sq, float sk,
                                                       int shift, float z, bool pf16, float s_a) {
  const float ell = live && refined ? fine_logit(ca[j], ca[2 + j], cb[j], cb[2 + j],
                                                 logit_multiplier(sq, sk, shift))
                                    : s_a;
  const float e = exp2_fp_sel(sub_rn(ell, z));
  KeyWeight k;
  k.pex = live ? e : 0.0f;
  k.pw = live ? round_operand(e, pf16) : 0.0f;
  k.cut = live ? 0.0f : e;
  return k;
}

// Exchanges two values (PIPE's two stage buffers' held-row bits).
template <typename T>
__device__ __forceinline__ void swap_values(T &a, T &b) {
  const T t = a;
  a = b;
  b = t;
}

// The byte at p + off where p and p + off lie in different allocations (v8's two planes: the
// same row's plane B from its plane A pointer), by integer arithmetic.
__device__ __forceinline__ const unsigned char *other_plane(const unsigned char *p, int64_t off) {
  return reinterpret_cast<const unsigned char *>(reinterpret_cast<uintptr_t>(p) + off);
}

// V8: the value stage rows hold V's plane A (D bytes) then plane B (D bytes), the same 2 D bytes
// as a 16-bit row and the same 16-byte pieces (D 128: piece c of row k at c ^ (k % 8), which
// permutes pieces within each plane's eight; D 64: pv_vrow's padded rows). Plane B is zero in the
// rows of live keys without a v-refine verdict (a + 0 / 8 = a: plane A's value exactly).
// The lane's ldmatrix base for pv_mma_chunk_acc_at's V8 form: matrix q = lane / 8 is plane q / 2,
// keys 8 (q % 2) .. of the warp's part, the m tile's 16 bytes (columns 16 mtile ..); as in the v8
// ring (decode_split_ring_kernel), lane (g, t) then holds keys 2t, 2t + 1 of columns 16 mtile +
// 2g, + 2g + 1 of each. The row's XOR is lane % 8 (the part's first key and the 16-key steps are
// multiples of 8).
template <int D>
__device__ __forceinline__ uint32_t pv_a_base_v8(const unsigned char *sv, int VR, int warp,
                                                 int lane) {
  constexpr int MT = D / 16, KP = pv_kparts(D);
  const int kpart = MT >= 8 ? 0 : warp / MT, mtile = MT >= 8 ? warp : warp % MT;
  const int key = kpart * (kChunk / KP) + 8 * ((lane >> 3) & 1) + (lane & 7);
  const int piece = (lane >> 4) * (D / 16) + (split2_vswz(D) ? (mtile ^ (lane & 7)) : mtile);
  return hopper::smem_u32(sv) + static_cast<uint32_t>(key * VR + 16 * piece);
}
// WIDE (G 5-8, split2_plan): no exchange; every lane's row g of the 8-row block is a real row, and
// each lane takes its two keys in both halves (four (row, key) pairs), so only the per-step
// overhead is halved, not the scalar work. RB = 2 (G 9-16, WIDE only): two row blocks, rows g and
// g + 8 (eight pairs per lane), as split_item's two row blocks: the same sums, the same bits.
//
// F16: the value planes (and the weight operands) are fp16, else bf16 (D: a template parameter,
// not c.dtype read per block: the operand rounding and the value product's form are then fixed
// per instance; the launcher picks the instance by dtype, split2_kernel). V8: V in two E4M3
// planes (bf16 weight operands): plane A gathered for every live key, plane B only for the keys
// with a v-refine verdict (split_item's rule: a coarse logit >= Z - v_refine_band for some row of
// the group), the value product on the tensor cores (pv_mma_chunk_acc_at's V8 form), N times
// 2^v_exp at the partial. The weights, sums and cut mass are bf16 V's, bit for bit.
// WIN (a step whose sliding window p.window_before can hide a key; v8 too), as
// split_item's WIN: the split sees keys [F, L) only, F = window_first(L, w); a split wholly
// before F adds nothing (the launcher's grid starts at F's split); the split holding F starts at
// F's 64-key half, whose keys before F are absent like the keys past the split's end (never
// live nor cut, not counted; their value rows zeroed like any row without a live key).
template <int NP, bool SA, bool WIDE, int RB, bool F16, bool V8 = false, bool WIN = false,
          bool PIPE = false, bool PAIR = false>
__device__ __forceinline__ void split2_item(const DecodeCache &c, const fold_decode_params_t &p,
                                            const Ws &ws, const int pass, int64_t *stats,
                                            const int s, const int hk, const int b,
                                            const int32_t *lengths, const int l2pf) {
  constexpr int D = 64 * NP;
  constexpr int VR = split2_vrow(D);
  static_assert(RB == 1 || (RB == 2 && WIDE && !SA), "two row blocks: the wide form only");
  static_assert(!V8 || !F16, "v8 weights are bf16 operands (the bf16 guard window)");
  static_assert(!PIPE || !SA, "PIPE keeps the refined keys' plane B in registers");
  static_assert(!PAIR || (!SA && !PIPE && !WIN), "PAIR: the register form, not windowed");
  constexpr int RS = 8 * RB;  // rows of the row blocks
  extern __shared__ __align__(16) unsigned char smem[];
  // Before the wait below (the front may still run: OVERLAP) only what the front does not write:
  // the lengths (`lengths`: the append's new lengths when the step appends), the page table, the
  // cache's rows. The front's output (q planes, sq, Z) after it.
  const int32_t L = lengths[b];
  const int32_t sb = s * kSplitKeys;  // the split's first key
  // WIN: the window's first key (0: none).
  const int32_t F = WIN ? window_first(L, p.window_before) : 0;
  if (sb >= L || (WIN && sb + kSplitKeys <= F)) {
    // A split without keys waits too: if no block of the grid waited (every request empty), the
    // grid could end before the front, and the kernels after it (which wait only for this one)
    // would run beside the front's resets.
    pdl_wait();
    return;
  }
  if (pass == 1 && ws.flag[static_cast<int64_t>(b) * c.n_kv_heads + hk] == 0) return;
  const int32_t s1 = min(L, sb + kSplitKeys);
  // The first key the split sees (lo), and s0 the first key of the half that holds it: the
  // halves, steps and pages below count from s0 (WIN: F's half in F's split; else the split's).
  const int32_t lo = WIN ? max(sb, F) : sb;
  const int32_t s0 = WIN ? max(sb, F & ~(kChunk - 1)) : sb;
  const int H = p.n_heads, G = H / c.n_kv_heads, P = c.page_size;
  // PAIR: two warp groups of kThreads threads; grp 1 screens, gathers and weighs the odd steps,
  // grp 0 the even ones and then, for both, the flushes, row sums and value product in key
  // order. tid and warp are the thread's within its group: every layout below is a group's.
  const int grp = PAIR ? static_cast<int>(threadIdx.x) / kThreads : 0;
  const bool lead = grp == 0;  // (the block's one-off work: one group)
  const int log2d = log2_pow2(D),
            tid = PAIR ? static_cast<int>(threadIdx.x) % kThreads : static_cast<int>(threadIdx.x),
            lane = tid & 31, warp = tid >> 5;
  const int kq = tid >> 2, u = tid & 3;  // screen layout: key kq of each half, quarter u
  const int mg = lane >> 2, mt = lane & 3;
  // After the exchange (G <= 4): this lane's half and row; WIDE: both halves, row g.
  const int hs = WIDE ? 0 : mg >> 2, r0 = WIDE ? mg : mg & 3;  // row 8 rb + r0
  constexpr int NSL = WIDE ? 2 : 1;                            // (half, two keys) slots per lane
  // Layout: every part whose size depends on G last, so that the others sit at compile-time
  // offsets (their addresses were being recomputed under the register bound).
  unsigned char *abuf = smem;  // SA: [128][D], plane A of a step
  unsigned char *stage = abuf + (SA ? static_cast<size_t>(kStep2) * D : 0);  // [128][VR]
  // (PIPE: a second [128][VR] stage, then the second step's verdict flags, 32 bytes.)
  // (PAIR: the second warp group's stage and flags there too, and below its own warp sums,
  // operand weights and coarse logits.)
  constexpr bool TWO = PIPE || PAIR;  // two stage and flag buffers, by the step's parity
  constexpr int NG = PAIR ? 2 : 1;    // copies of w, wsum, wop
  float *ns = reinterpret_cast<float *>(stage + (TWO ? 2 * kStep2 * VR + 32 : kStep2 * VR));
  // ([kp][D][RS])
  constexpr int nsz = pv_kparts(D) * RS * D;
  float *wsum = ns + nsz;  // [half][T, T_lse, cut][warp][RS]: a step's 8-key sums (quad_sum)
  uint16_t *wop = reinterpret_cast<uint16_t *>(wsum + NG * 2 * 3 * 8 * RS);  // [RS][kWRow2]
  uint4 *qfrag = reinterpret_cast<uint4 *>(wop + NG * RS * kWRow2);
  // The fixed-size tables (kS2*, above), then the row constants, then w: all in the dynamic
  // block, at offsets from its base known at compile time (B). As static __shared__ arrays their
  // addresses were rebuilt inside the step loop (S2UR SR_CgaCtaId, ULEA, per use of s_scale,
  // s_flag8, s_newpage in the SASS) next to the dynamic block's own base.
  unsigned char *tab = reinterpret_cast<unsigned char *>(qfrag + RB * 2 * NP * 32);
  uint16_t *s_scale = reinterpret_cast<uint16_t *>(tab + kS2Scale);    // [kSplitKeys]
  int64_t *s_rowbase = reinterpret_cast<int64_t *>(tab + kS2RowBase);  // [kSplitKeys / kChunk]
  int64_t &s_row0 = *reinterpret_cast<int64_t *>(tab + kS2Row0);
  // [f][warp], f = live in half 0, live in half 1, cut in half 0, cut in half 1: 1 where one of
  // the warp's 8 keys of the step's half has flag f, else 0.
  unsigned char *s_flag8 = tab + kS2Flag8;
  int32_t *s_page_last = reinterpret_cast<int32_t *>(tab + kS2PageLast);  // [kPagesPerSplit]
  uint32_t *s_wcount = reinterpret_cast<uint32_t *>(tab + kS2WCount);  // per warp, after the loop
  uint32_t &s_newpage =
      *reinterpret_cast<uint32_t *>(tab + kS2NewPage);  // bit i: half i starts a page
  // Per 64-key half hi: the cache row's plane A, value and plane B pointers (C: the gathers add
  // only the thread's key and quarter to a pointer read from shared memory, not rebuild
  // base + (row + kq) * size from the 64-bit row).
  const unsigned char **s_pa = reinterpret_cast<const unsigned char **>(tab + kS2Ptr);
  const unsigned char **s_pv = s_pa + kSplitKeys / kChunk, **s_pb = s_pa + 2 * kSplitKeys / kChunk;
  // [RS][4]: sq, z, thr_live, thr_ref of row r as one float4 (A: one 16-byte load per row in the
  // step loop where four loads from four G-dependent addresses were).
  float *rowc = reinterpret_cast<float *>(tab + kS2Fixed);
  float *w = rowc + RS * 4;  // [G][kWS2]: coarse logits
  float *f = w + NG * G * kWS2;
  // Per row: T, T_lse, cut (contiguous: the row sums index them as one array, below), then the
  // page cuts [kPagesPerSplit][G].
  float *ts = f, *tlse = f + G, *cut = f + 2 * G, *page_cut = f + 3 * G;

  const int64_t row0 = static_cast<int64_t>(b) * H + hk * G;
  // Needed again only after the step loop: read back from shared memory there, not held in two
  // registers across the loop (ptxas spilled it, once before and after the loop, where the
  // loop's registers reached the launch bound).
  if (lead && tid == 0) s_row0 = row0;  // (read after the loop's barriers)
  // Operand rows >= G stay zero; rows < G are written every step (zero without a live bit).
  // (PAIR: each group its own.)
  for (int e = tid; e < RS * kWRow2 / 2; e += kThreads)
    reinterpret_cast<uint32_t *>(wop + grp * RS * kWRow2)[e] = 0u;

  const int nhalves = (s1 - s0 + kChunk - 1) / kChunk;
  if (lead && tid < nhalves) {
    const int64_t row = key_row(c, b, hk, s0 + tid * kChunk);
    s_rowbase[tid] = row;
    s_pa[tid] = reinterpret_cast<const unsigned char *>(c.k_a + row * D);
    s_pb[tid] = reinterpret_cast<const unsigned char *>(c.k_b + row * D);
    s_pv[tid] = V8 ? c.v_a + row * D : static_cast<const unsigned char *>(c.v) + row * 2 * D;
    if (l2pf != 0) {
      // A small grid (l2pf): the half's values and plane B (those of its live, refined keys are
      // gathered a step's verdicts later) and plane A past the first step (loaded a step ahead),
      // asked of L2 now. Scheduling only: the same loads later, the same bits.
      const uint32_t nk = static_cast<uint32_t>(min(kChunk, s1 - (s0 + tid * kChunk)));
      l2_prefetch_values_b<D, V8>(c, row, nk);
      if (tid >= 2) l2_prefetch(c.k_a + row * D, nk * D);
    }
  }
  if (lead && tid == 0) s_newpage = page_starts(s0, nhalves, P);  // (read after the first barrier)
  // The split's 64-key halves are numbered hi (keys from s0 + 64 hi; step hi / 2, half hi % 2),
  // their cache rows read as s_rowbase[hi] (after the first barrier): found from a key's offset
  // in the split, every use had divided it by 64, signed.
  // Plane A of key kq of half hi, this thread's quarter (zeros past the split). Before the first
  // barrier (`direct`) the row comes from the page table, not s_rowbase.
  auto load_a = [&](int hi, int4 *a, bool direct) {
    const int32_t jh = s0 + kChunk * hi;
    if (kq < s1 - jh) {
      const int64_t row = direct ? key_row(c, b, hk, jh) : s_rowbase[hi];
      const int4 *pa = reinterpret_cast<const int4 *>(c.k_a + (row + kq) * D);
#pragma unroll
      for (int i = 0; i < NP; ++i) a[i] = pa[u + 4 * i];
    } else {
#pragma unroll
      for (int i = 0; i < NP; ++i) a[i] = make_int4(0, 0, 0, 0);
    }
  };
  // SA: where piece u + 4 i of key kq's plane A sits in abuf row kq (half h: + 64 h D), once
  // per split: the copies, the zero fills and the reads then add only constants (ptxas rebuilt
  // every address per use, with the swizzle).
  unsigned char *a_p[NP];
#pragma unroll
  for (int i = 0; i < NP; ++i) a_p[i] = abuf + kq * D + 16 * split2_apiece(D, kq, u + 4 * i);
  // SA: plane A of key kq of half hi into abuf row 64 h + kq, h = hi % 2 (zeros past the split).
  // Each thread writes and later reads only its own quarter's bytes: no barrier between. The
  // source as one pointer at the thread's quarter (piece i: + 64 i bytes).
  auto load_a_async = [&](int hi, int h) {
    const int off = kChunk * h * D;
    if (kq < s1 - (s0 + kChunk * hi)) {
      const auto *src = s_pa[hi] + (kq * D + 16 * u);
#pragma unroll
      for (int i = 0; i < NP; ++i) cp_async16(a_p[i] + off, src + 64 * i);
    } else {
#pragma unroll
      for (int i = 0; i < NP; ++i)
        *reinterpret_cast<uint4 *>(a_p[i] + off) = make_uint4(0u, 0u, 0u, 0u);
    }
  };
  // Without SA the next step's plane A is loaded into ka itself once the coarse dots consumed
  // it (F: no second set of plane registers and no copy at the end of the step).
  int4 ka[2][NP], kb[2][NP];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < NP; ++i) kb[h][i] = make_int4(0, 0, 0, 0);
  if (lead && tid < nhalves * 8) {  // the split's key scales (see split_item)
    const int64_t rr = key_row(c, b, hk, s0 + (tid >> 3) * kChunk) + 8 * (tid & 7);
    cp_async16(s_scale + 8 * tid, c.k_scale + rr);
  }
  cp_async_commit();
  if constexpr (SA) {
    __syncthreads();  // s_pa (load_a_async reads it), s_newpage
    load_a_async(0, 0);
    load_a_async(1, 1);
    cp_async_commit();
  } else {  // (PAIR: the group's first step, 1 for grp 1)
    load_a(2 * grp, ka[0], true);
    load_a(2 * grp + 1, ka[1], true);
  }
  // The front's output: its q planes, sq and Z (OVERLAP: the first step's plane A, the scales and
  // the page rows are in flight meanwhile).
  pdl_wait();
  if (lead) load_q_fragments<NP>(qfrag, ws, row0, G, RB, tid);
  for (int g = tid; lead && g < G; g += kThreads) {
    const float z = ws.z[row0 + g];
    rowc[4 * g] = ws.sq[row0 + g];
    rowc[4 * g + 1] = z;
    rowc[4 * g + 2] = sub_rn(z, p.depth);
    rowc[4 * g + 3] = sub_rn(z, p.refine_band);
    ts[g] = 0.0f;
    tlse[g] = 0.0f;
    cut[g] = 0.0f;
  }
  // Keys whose coarse logit may be a binade or more off are live and refined (planes.h,
  // coarse_untrusted), whatever the rows' thresholds say.
  const float e_max = group_e_max(ws, row0, G);
  cp_async_wait<0>();
  __syncthreads();

  float acc[RB][4];  // this warp's N accumulators (pv_mma_chunk_acc_at), per row block
#pragma unroll
  for (int rb = 0; rb < RB; ++rb)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[rb][i] = 0.0f;
  // The value product's ldmatrix bases for half 0 (pv_acc_bases), computed once and pinned: an
  // empty asm makes them opaque, so ptxas keeps the two registers instead of rebuilding both
  // addresses in every conditional 16-key step; half h adds kChunk h VR and 2 kChunk h bytes.
  uint32_t pv_a, pv_b;
  pv_acc_bases<D, kWRow2, split2_vswz(D)>(stage, wop, VR, warp, lane, pv_a, pv_b);
  if constexpr (V8) pv_a = pv_a_base_v8<D>(stage, VR, warp, lane);
  asm volatile("" : "+r"(pv_a));
  asm volatile("" : "+r"(pv_b));
  // D >= 128 (BYROW): the value gathers by rows. Copy i of a warp's lane takes 16-byte piece
  // lane % PPR of the warp's key kv + RPI i (of its 8 keys in each half), so that one copy
  // instruction moves RPI whole rows (D 128: two rows of 256 bytes) where it moved a 64-byte
  // quarter of 8 rows (ncu, session 34, B128 L4K: each such copy cost 3.5 wavefronts of the
  // ideal 1; graphed attend -3 to -9% at D 128 G 4 / 8). D 64 keeps the thread's own key kq
  // (+1.5% by rows at B32 L16K: its quarter rows of 128 bytes were not split that badly).
  // BYROW: the lane's stage row at its piece (half h: + 64 h VR, copy i: + RPI i VR) and its
  // source offset in a half's rows (copy i: + RPI i 2 D); else the stage row kq at the thread's
  // quarter (half h: + 64 h VR, piece i: + 64 i).
  constexpr bool BYROW = D >= 128;
  static_assert(BYROW == split2_vswz(D), "the swizzled stage is written by rows");
  constexpr int PPR = D / 8, RPI = 32 / PPR;  // pieces per value row, rows per copy
  static_assert(!BYROW || 32 % PPR == 0, "by rows: a warp's copy covers whole rows");
  const int kv = BYROW ? lane / PPR : 0;
  // (BYROW: the row base; copy i's piece is (lane % PPR) ^ ((kv + RPI i) % 8), split2_vrow.)
  unsigned char *const v_p = BYROW ? stage + (8 * warp + kv) * VR : stage + kq * VR + 16 * u;
  // V8: the half's pointer is plane A's row (D bytes per key); plane B's pieces (BYROW: pieces
  // PPR / 2 .. of a row; else the thread's second piece) come from the same offset in c.v_b.
  // (Offsets between the two planes' allocations as integers: a pointer difference across
  // allocations is undefined.)
  [[maybe_unused]] const int64_t vb_off =
      V8 ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(c.v_b) -
                                reinterpret_cast<uintptr_t>(c.v_a))
         : 0;
  const int v_src = V8 ? (8 * warp + kv) * D + 16 * (lane % (PPR / 2))
                       : (8 * warp + kv) * 2 * D + 16 * (lane % PPR);
  constexpr int VRB = V8 ? D : 2 * D;  // bytes per key of a half's rows from its pointer
  // BYROW: bit 4 k + h, the warp's stage row (half h, key 8 warp + k) may hold a value (see
  // split_item), as the bits of the ballot lc below; else row_held[h] for the thread's key kq.
  uint32_t rows_held = 0x33333333u;
  bool row_held[2] = {true, true};
  // V8: the same for plane B's pieces, held where the key was v-refined (BYROW: the lane's piece
  // is plane B's when lane % PPR >= PPR / 2; then its copies follow the v-refine ballot lvr, not
  // the live bits).
  uint32_t rows_held_b = 0x33333333u;
  [[maybe_unused]] bool row_held_b[2] = {true, true};
  const bool piece_b = V8 && BYROW && lane % PPR >= PPR / 2;
  // Live keys + refined keys << 16, as seen by this thread: every thread counts its key kq of
  // both halves, so the block's sum is four times the split's counts (<= 4 kSplitKeys each).
  static_assert(4 * kSplitKeys < 0x10000, "the live count must not carry into the refined one");
  uint32_t cnt = 0u;
  [[maybe_unused]] uint32_t cnt_v =
      0u;  // V8: v-refined keys, counted as cnt's (four lanes per key)
  int n_pages = 0;
  bool page_has_cut = false;
  const int nsteps = (s1 - s0 + kStep2 - 1) / kStep2;
  // The byte offset from w of the lane's row r0 at key kl0(0), computed once and pinned (A): row
  // block rb and slot sl then add constants, where ptxas rebuilt r kWS2 + kl0(sl) per use.
  uint32_t wb =
      static_cast<uint32_t>((r0 * kWS2 + (WIDE ? 0 : kChunk * hs) + 8 * warp + 2 * mt) * 4);
  asm volatile("" : "+r"(wb));
  // Slot sl: half hh(sl) (WIDE: sl; else the lane's half after the exchange), keys kl0(sl),
  // kl0(sl) + 1 of the step.
  const auto hh = [&](int sl) { return WIDE ? sl : hs; };
  const auto kl0 = [&](int sl) { return kChunk * hh(sl) + 8 * warp + 2 * mt; };
  // What a step's screen and gathers (screen_gather) leave for its weights: the keys present and
  // their scales, the coarse dots, the verdict bits, the refine verdicts and (without SA) the
  // refined keys' plane B (kb, above). PIPE: the next step's screen and gathers run between a
  // step's weights and its value product, so from there on these hold the next step's.
  bool mpres[NSL][2];
  float skj[NSL][2];
  int32_t ca[RB][NSL][4];
  int vbits[NSL];
  bool refine[2];
  // PIPE: the other stage buffer's held rows (rows_held, row_held and V8's plane-B forms above
  // are those of the buffer the next gathers write; each step's gathers swap them).
  [[maybe_unused]] uint32_t rows_held_o = 0x33333333u, rows_held_b_o = 0x33333333u;
  [[maybe_unused]] bool row_held_o[2] = {true, true}, row_held_b_o[2] = {true, true};
  // The verdict flags of step si (PIPE, PAIR: two buffers by its parity, the second after the
  // stages).
  const auto flags_of = [&](int si) {
    return TWO && (si & 1) != 0 ? stage + 2 * kStep2 * VR : s_flag8;
  };
  // PAIR: step si's coarse logits, warp sums and operand weights (its group's, by parity).
  const auto w_of = [&](int si) { return PAIR ? w + (si & 1) * G * kWS2 : w; };
  const auto wsum_of = [&](int si) { return PAIR ? wsum + (si & 1) * 2 * 3 * 8 * RS : wsum; };
  const auto wop_of = [&](int si) { return PAIR ? wop + (si & 1) * RS * kWRow2 : wop; };
  // Step si's screen (coarse dots, verdicts, flags), its gathers (plane B of the refined keys,
  // the live keys' values into the step's stage buffer) and the step after it's plane A.
  const auto screen_gather = [&](const int si) {
    const int32_t j0 = s0 + si * kStep2;
    // The step whose plane A this one loads: the next (PAIR: the group's next, si + 2).
    const int sn = PAIR ? si + 2 : si + 1;
    const bool more = sn < nsteps;
    const int64_t *const rows = s_rowbase + 2 * si;  // the cache rows of the step's halves
    // The step's stage buffer's rows (PIPE: two buffers, by the step's parity).
    unsigned char *const v_ps = v_p + (TWO ? (si & 1) * kStep2 * VR : 0);
    // Keys of each half (a select, not an array indexed by the lane's half: that went to the
    // stack).
    const int nkh0 = min(kChunk, s1 - j0), nkh1 = max(0, min(kChunk, s1 - j0 - kChunk));
    // WIN: the keys of half 0 of the first step before lo (lo - s0 < 64: only there).
    const int klo0 = WIN && si == 0 ? lo - s0 : 0;
#pragma unroll
    for (int sl = 0; sl < NSL; ++sl) {
      const int nk_mine = hh(sl) == 0 ? nkh0 : nkh1;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = 8 * warp + 2 * mt + j;
        mpres[sl][j] = key < nk_mine && (!WIN || hh(sl) != 0 || key >= klo0);
        skj[sl][j] = nk_mine > 0 ? bf16_bits_to_float(s_scale[j0 - s0 + kl0(sl) + j]) : 0.0f;
      }
    }
    if constexpr (SA) {
      cp_async_wait<0>();  // this thread's plane-A copies of the step
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < NP; ++i)
          ka[h][i] = *reinterpret_cast<const int4 *>(a_p[i] + kChunk * h * D);
    }
    // Coarse dots of both halves (split2_dots), per row block.
#pragma unroll
    for (int rb = 0; rb < RB; ++rb) split2_dots<NP, WIDE>(qfrag, rb, lane, hs, ka, ca[rb]);
#pragma unroll
    // Per slot: keys 2t (bits 0-2), 2t + 1 (bits 3-5): live, refine, v-refine (V8); OR over rows
    // (into vbits).
    for (int sl = 0; sl < NSL; ++sl) {
      vbits[sl] = 0;
#pragma unroll
      for (int rb = 0; rb < RB; ++rb) {
        const int r = 8 * rb + r0;
        if (r < G) {
          const float4 rc = *reinterpret_cast<const float4 *>(rowc + 4 * r);
          const float sq_r = rc.x, tl_r = rc.z, tr_r = rc.w;
          float *const wr =
              reinterpret_cast<float *>(reinterpret_cast<unsigned char *>(w_of(si)) + wb +
                                        4 * (8 * rb * kWS2 + (WIDE ? kChunk * sl : 0)));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float sa = coarse_logit(ca[rb][sl][j], ca[rb][sl][2 + j],
                                          logit_multiplier(sq_r, skj[sl][j], 8 + log2d));
            vbits[sl] |= ((sa >= tl_r ? 1 : 0) | (sa >= tr_r ? 2 : 0) |
                          (V8 && sa >= sub_rn(rc.y, p.v_refine_band) ? 4 : 0))
                         << (3 * j);
            wr[j] = sa;
          }
        }
      }
      // The coarse-error rule depends on the key only: every lane of a key may report it.
#pragma unroll
      for (int j = 0; j < 2; ++j)
        vbits[sl] |= coarse_untrusted(skj[sl][j], e_max) ? 3 << (3 * j) : 0;
      vbits[sl] |= __shfl_xor_sync(0xffffffffu, vbits[sl], 4);  // rows of the same half
      vbits[sl] |= __shfl_xor_sync(0xffffffffu, vbits[sl], 8);
      if (WIDE) vbits[sl] |= __shfl_xor_sync(0xffffffffu, vbits[sl], 16);
    }
    bool live[2], present[2], vref[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Key kq = 8 warp + (lane >> 2) of half h is key 2t + j of the MMA lanes of half h, t =
      // lane >> 3, j = (lane >> 2) & 1; row 0 of half h is lane 16 h + t (WIDE: lane t of
      // slot h).
      const int src = WIDE ? __shfl_sync(0xffffffffu, vbits[WIDE ? h : 0], lane >> 3)
                           : __shfl_sync(0xffffffffu, vbits[0], 16 * h + (lane >> 3));
      const int mine = src >> (3 * ((lane >> 2) & 1));
      present[h] = kq < (h == 0 ? nkh0 : nkh1) && (!WIN || h != 0 || kq >= klo0);
      live[h] = (mine & 1) != 0 && present[h];
      refine[h] = (mine & 2) != 0 && live[h];
      vref[h] = V8 && (mine & 4) != 0 && live[h];
    }
    // The verdicts' bookkeeping. The four lanes of a key agree on its flags (they depend on kq
    // only), so one ballot in which lane u reports flag u of its key (live in half 0, 1; cut,
    // i.e. present and not live, in half 0, 1) holds them all, and lane f < 4 writes byte f of
    // the warp: whether one of its 8 keys has flag f. The consumers need no more: the value
    // product skips a 16-key step whose two live bytes are 0, exactly where split_item's packed
    // key bits (pack_keys) are 0, and a half has a cut key where one of its cut bytes is not 0.
    // The counts are per thread (cnt), summed after the loop. One ballot, one store and a few
    // adds per step, where each half had three ballots, two packs, three popcounts and a shared
    // read-modify-write. (Bit u of an integer, not live[u]: an array indexed by the lane went to
    // the stack.)
    const unsigned int fl = (live[0] ? 1u : 0u) | (live[1] ? 2u : 0u) |
                            (present[0] && !live[0] ? 4u : 0u) | (present[1] && !live[1] ? 8u : 0u);
    const unsigned int lc = __ballot_sync(0xffffffffu, ((fl >> u) & 1u) != 0);
    if (lane < 4) flags_of(si)[8 * lane + warp] = (lc & (0x11111111u << lane)) != 0 ? 1 : 0;
    cnt += (live[0] ? 1u : 0u) + (live[1] ? 1u : 0u) + (refine[0] ? 0x10000u : 0u) +
           (refine[1] ? 0x10000u : 0u);
    // V8: the v-refine verdicts, ballot as lc's live bits (bit 4 k + h: key 8 warp + k, half h).
    uint32_t lvr = 0u;
    if constexpr (V8) {
      const unsigned int vfl = (vref[0] ? 1u : 0u) | (vref[1] ? 2u : 0u);
      lvr = __ballot_sync(0xffffffffu, ((vfl >> u) & 1u) != 0);
      cnt_v += (vref[0] ? 1u : 0u) + (vref[1] ? 1u : 0u);
    }
    // Gathers: plane B of the refined keys (registers), the live keys' values (stage rows
    // 64 h + k: v_p above); then the next step's plane A. Each copy from one source pointer and
    // the destination v_p plus constants: written per piece, both addresses were rebuilt for
    // every copy, the offsets OR-ed in, not folded into the instruction's immediates.
    if constexpr (BYROW) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!SA && refine[h]) {
          const int4 *pb = reinterpret_cast<const int4 *>(c.k_b + (rows[h] + kq) * D);
#pragma unroll
          for (int i = 0; i < NP; ++i) kb[h][i] = pb[u + 4 * i];
        }
      }
      // (V8: a plane-B piece's lane copies where its key is v-refined and zeroes where plane B
      // was held.)
      const uint32_t lv = (piece_b ? lvr : lc) >> (4 * kv),
                     hv = (piece_b ? rows_held_b : rows_held) >> (4 * kv);  // (this lane's rows)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < 2 * NP; ++i) {
          unsigned char *dst =
              v_ps + (kChunk * h + RPI * i) * VR + 16 * ((lane % PPR) ^ ((kv + RPI * i) & 7));
          // (V8: plane B's lanes read c.v_b, vb_off past the half's plane-A pointer.)
          if ((lv >> (4 * RPI * i + h)) & 1u)
            cp_async16(
                dst, (V8 ? other_plane(s_pv[2 * si + h], piece_b ? vb_off : 0) : s_pv[2 * si + h]) +
                         (v_src + RPI * i * VRB));
          else if ((hv >> (4 * RPI * i + h)) & 1u)
            *reinterpret_cast<uint4 *>(dst) = make_uint4(0u, 0u, 0u, 0u);
        }
      }
      rows_held = lc & 0x33333333u;
      if constexpr (V8) rows_held_b = lvr & 0x33333333u;
      if constexpr (PIPE) {  // (the next step writes the other buffer)
        swap_values(rows_held, rows_held_o);
        swap_values(rows_held_b, rows_held_b_o);
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        unsigned char *dst = v_ps + kChunk * h * VR;
        if (live[h]) {
          const int64_t rr = rows[h] + kq;
          if (!SA && refine[h]) {
            const int4 *pb = reinterpret_cast<const int4 *>(c.k_b + rr * D);
#pragma unroll
            for (int i = 0; i < NP; ++i) kb[h][i] = pb[u + 4 * i];
          }
          if constexpr (V8) {
            // Plane A's pieces of the thread's quarter, then plane B's (D bytes on) where the
            // key is v-refined, else zeros where plane B was held.
            const unsigned char *src = s_pv[2 * si + h] + (kq * D + 16 * u);
#pragma unroll
            for (int i = 0; i < NP; ++i) cp_async16(dst + 64 * i, src + 64 * i);
#pragma unroll
            for (int i = 0; i < NP; ++i) {
              if (vref[h])
                cp_async16(dst + D + 64 * i, other_plane(src, vb_off) + 64 * i);
              else if (row_held_b[h])
                *reinterpret_cast<uint4 *>(dst + D + 64 * i) = make_uint4(0u, 0u, 0u, 0u);
            }
          } else {
            const unsigned char *src = s_pv[2 * si + h] + (kq * 2 * D + 16 * u);
#pragma unroll
            for (int i = 0; i < 2 * NP; ++i) cp_async16(dst + 64 * i, src + 64 * i);
          }
        } else if (row_held[h]) {  // (V8: both planes; plane B is held only where A is)
#pragma unroll
          for (int i = 0; i < 2 * NP; ++i)
            *reinterpret_cast<uint4 *>(dst + 64 * i) = make_uint4(0u, 0u, 0u, 0u);
        }
        row_held[h] = live[h];
        if constexpr (V8) row_held_b[h] = vref[h];
        if constexpr (PIPE) {  // (the next step writes the other buffer)
          swap_values(row_held[h], row_held_o[h]);
          swap_values(row_held_b[h], row_held_b_o[h]);
        }
      }
    }
    cp_async_commit();
    if (more) {
      if constexpr (SA) {  // (the step's plane-A reads are done: the IMMAs consumed them)
        load_a_async(2 * sn, 0);
        load_a_async(2 * sn + 1, 1);
      } else {
        load_a(2 * sn, ka[0], false);  // (ka is dead after the coarse dots above)
        load_a(2 * sn + 1, ka[1], false);
      }
    }
    if constexpr (SA) cp_async_commit();  // (an empty group when !more)
  };
  // Step si's weights (after its screen and gathers): per slot, the lane's two keys and its row,
  // into the step's operand weights and 8-key sums.
  const auto weights = [&](const int si) {
    // Weights (per slot, the lane's two keys and its row): live keys 2^(ell - Z) rounded to the
    // value operand, cut keys 2^(s_A - Z).
    const bool any_refine = __any_sync(0xffffffffu, refine[0] || refine[1]);
    int32_t cb[RB][NSL][4];
#pragma unroll
    for (int rb = 0; rb < RB; ++rb)
#pragma unroll
      for (int sl = 0; sl < NSL; ++sl)
#pragma unroll
        for (int i = 0; i < 4; ++i) cb[rb][sl][i] = 0;
    if (any_refine) {
      if constexpr (SA) {  // plane B of the refined keys, loaded here (short live range)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (refine[h]) {
            const int4 *pb = reinterpret_cast<const int4 *>(s_pb[2 * si + h] + kq * D);
#pragma unroll
            for (int i = 0; i < NP; ++i) kb[h][i] = pb[u + 4 * i];
          } else {
#pragma unroll
            for (int i = 0; i < NP; ++i) kb[h][i] = make_int4(0, 0, 0, 0);
          }
        }
      }
#pragma unroll
      for (int rb = 0; rb < RB; ++rb)  // q planes x key plane B
        split2_dots<NP, WIDE>(qfrag, rb, lane, hs, kb, cb[rb]);
    }
#pragma unroll
    for (int sl = 0; sl < NSL; ++sl) {
#pragma unroll
      for (int rb = 0; rb < RB; ++rb) {
        const int r = 8 * rb + r0;
        const bool rv = r < G;
        float vt[2] = {0.0f, 0.0f}, vtl[2] = {0.0f, 0.0f}, vc[2] = {0.0f, 0.0f};
        if (rv) {
          float opw[2] = {0.0f, 0.0f};
          const float4 rc = *reinterpret_cast<const float4 *>(rowc + 4 * r);
          const float sq_r = rc.x, z_r = rc.y;
          const float *const wr =
              reinterpret_cast<const float *>(reinterpret_cast<const unsigned char *>(w_of(si)) +
                                              wb + 4 * (8 * rb * kWS2 + (WIDE ? kChunk * sl : 0)));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int bits = vbits[sl] >> (3 * j);
            const bool mlive = (bits & 1) != 0 && mpres[sl][j];
            const bool mref = (bits & 2) != 0 && mlive;
            // Absent keys (past the split) run the same selects, branch-free (D): not live, so
            // pw = pex = 0 as the zeros they kept, and their cut mass is masked to 0 below; their
            // w entry was written by the coarse step (a finite or not value, only ever masked).
            const KeyWeight kw = split2_key_weight(mlive, mref, ca[rb][sl], cb[rb][sl], j, sq_r,
                                                   skj[sl][j], 16 + log2d, z_r, F16, wr[j]);
            vt[j] = kw.pw;
            vtl[j] = kw.pex;
            vc[j] = mpres[sl][j] ? kw.cut : 0.0f;
            opw[j] = kw.pw;
          }
          reinterpret_cast<uint32_t *>(wop_of(si) + r * kWRow2)[kl0(sl) / 2] =
              pack_operands<F16>(opw[0], opw[1]);
        }
        // This warp's 8-key sums of row r in half hh(sl), as split_item's (quad_sum).
        const float st = quad_sum(add_rn(vt[0], vt[1]));
        const float stl = quad_sum(add_rn(vtl[0], vtl[1]));
        const float sc = quad_sum(add_rn(vc[0], vc[1]));
        if (mt == 0 && rv) {
          float *ws8 = wsum_of(si) + (hh(sl) * 3 * 8 + warp) * RS + r;
          ws8[0] = st;
          ws8[8 * RS] = stl;
          ws8[16 * RS] = sc;
        }
      }
    }
  };
  // Step si's page flushes, row sums and value product (after the barrier that follows its
  // weights and gathers).
  const auto flush_value = [&](const int si) {
    const int32_t j0 = s0 + si * kStep2;
    const int nkh0 = min(kChunk, s1 - j0), nkh1 = max(0, min(kChunk, s1 - j0 - kChunk));
    // Per half, as split_item per chunk: page flushes, the rows' sums in key order, the value
    // product. E: one sum per thread, thread kThreads - 1 - e for e = k G + g (row g's T, T_lse,
    // cut for k = 0, 1, 2), where one thread per row added all three one after the other: the
    // same add_rn of the same warp_tree8 per sum, so the same bits. Ownership: cut[g] (e = 2 G + g)
    // is read, written and reset by that one thread only in the loop (sums and flushes below), so
    // program order orders them, no barrier needed; the other threads touch ts / tlse / cut /
    // page_cut only before the first barrier (init) and after the loop's last one (the final
    // flush and the partial), as before. wsum is written before this step's barrier above and
    // rewritten only after the barrier that ends the step.
    const int g_first = kThreads - 1 - tid;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int nk = h == 0 ? nkh0 : nkh1;
      if (nk <= 0) continue;
      const int32_t jh = j0 + kChunk * h;
      // (Byte w is 1 where warp w has a live key: a 16-key step of the value product runs
      // where its two bytes are not both 0, i.e. where split_item's packed key bits are not.)
      const unsigned char *const fl8 = flags_of(si);
      const uint64_t live_mask = *reinterpret_cast<const uint64_t *>(fl8 + 8 * h);
      const bool chunk_cut = *reinterpret_cast<const uint64_t *>(fl8 + 8 * (2 + h)) != 0;
      const bool new_page = ((s_newpage >> (2 * si + h)) & 1u) != 0;
      if (new_page && page_has_cut) {
        if (const int e = g_first - 2 * G; e >= 0 && e < G) {  // cut[e]'s owner (see above)
          page_cut[n_pages * G + e] = cut[e];
          cut[e] = 0.0f;
        }
        if (tid == 0) s_page_last[n_pages] = jh - 1;
        n_pages += 1;
      }
      if (new_page) page_has_cut = false;
      page_has_cut = page_has_cut || chunk_cut;
      if (const int e = g_first; e < 3 * G) {  // sum k of row g, ts[e] = ts / tlse / cut[g]
        const int k = (e >= G ? 1 : 0) + (e >= 2 * G ? 1 : 0), g = e - k * G;
        const float *ws8 = wsum_of(si) + h * 3 * 8 * RS + k * 8 * RS + g;
        ts[e] = add_rn(ts[e], warp_tree8(ws8, RS));
      }
      const uint32_t a_h =
          pv_a + static_cast<uint32_t>(kChunk * h * VR + (TWO ? (si & 1) * kStep2 * VR : 0));
      const uint32_t b_h =
          pv_b + static_cast<uint32_t>(kChunk * h * 2 + (PAIR ? (si & 1) * RS * kWRow2 * 2 : 0));
      pv_mma_chunk_acc_at<D, F16, kWRow2, RB, V8>(acc, a_h, b_h, VR, live_mask, warp);
    }
  };
  // PIPE (a grid of at most one block per SM, where a block's time is its chain of steps, each
  // waiting for the gathers its verdicts issued): step si + 1's screen and gathers are issued
  // between step si's weights and its value product, so that their memory latency overlaps the
  // value product and the next weights instead of following them. Only the order in which the
  // work is issued changes: every value, sum and flush is computed as without it, the same bits.
  // PAIR (split2_plan): steps 2k and 2k + 1 screened, gathered and weighed at once by the two
  // groups, each into its own buffers; then grp 0 flushes, sums and multiplies both in key order.
  // Each step's work is split_item's, in the same order where it fixes the bits: the same bits.
  if constexpr (PAIR) {
    for (int s2 = 0; s2 < nsteps; s2 += 2) {
      if (s2 + grp < nsteps) {
        screen_gather(s2 + grp);
        weights(s2 + grp);
      }
      cp_async_wait<0>();  // the group's gathers
      __syncthreads();
      if (grp == 0) {
        flush_value(s2);
        if (s2 + 1 < nsteps) flush_value(s2 + 1);
      }
      __syncthreads();
    }
  } else {
    if constexpr (PIPE) screen_gather(0);
    for (int si = 0; si < nsteps; ++si) {
      if constexpr (!PIPE) screen_gather(si);
      weights(si);
      // The gathers (SA: all but the newest group, the next step's plane A).
      if (SA)
        cp_async_wait<1>();
      else
        cp_async_wait<0>();
      __syncthreads();
      // PIPE: the next step's screen and gathers (into the other stage and flag buffers; w and
      // the weights' registers are this step's no more: its weights are done).
      if constexpr (PIPE)
        if (si + 1 < nsteps) screen_gather(si + 1);
      flush_value(si);
      __syncthreads();
    }
  }
  // V8: the v-refined counts per warp, in the pointer table (free after the loop: its last reads
  // of s_pa / s_pv / s_pb were before the loop's last barrier).
  [[maybe_unused]] uint32_t *const s_vcount = reinterpret_cast<uint32_t *>(tab + kS2Ptr);
  // PAIR: grp 1 reaches the barrier below with its counts only (it flushed nothing: n_pages 0,
  // no page cut; its acc is not the split's), and leaves after it.
  const int n_flushed = n_pages;  // pages flushed in the loop (s_page_last read after its barriers)
  if (page_has_cut) {
    for (int g = tid; g < G; g += kThreads) page_cut[n_pages * G + g] = cut[g];
    if (tid == 0) s_page_last[n_pages] = s1 - 1;
    n_pages += 1;
  }
  // The cut pages' mean value rows, once per (page, column) instead of once per (row, page,
  // column): ~69 instructions each, half of them the page's integer division and remainder. The
  // same div_rn of the same operands, so the same bits. Into the value stage: free after the
  // loop's last barrier (its gathers were waited before it, its value products read the stage
  // before it); the barrier below separates these writes from the reads. The last page's last
  // key is s1 - 1 here, not read back from s_page_last (written by thread 0 just above).
  static_assert(kPagesPerSplit * D * sizeof(float) <= static_cast<size_t>(kStep2) * VR,
                "the page means must fit in the value stage");
  float *page_mean = reinterpret_cast<float *>(stage);  // [page][D]
  for (int e = tid; e < n_pages * D; e += kThreads) {
    const int i = e / D, d = e % D;
    const int32_t last = i < n_flushed ? s_page_last[i] : s1 - 1;
    const int32_t count = min(P, L - (last - last % P));
    page_mean[e] =
        div_rn(c.v_page_sum[page_sum_base(c, b, hk, last) + d], static_cast<float>(count));
  }
  if (!PAIR || grp == 0) pv_acc_store<D, RB, V8>(ns, acc, RS, warp, lane);
  cnt = __reduce_add_sync(0xffffffffu, cnt);
  if (lane == 0) s_wcount[grp * (kThreads / 32) + warp] = cnt;  // (PAIR: grp 1's warps 8..)
  // V8: the v-refined count beside it (s_vcount, above).
  if constexpr (V8) {
    cnt_v = __reduce_add_sync(0xffffffffu, cnt_v);
    if (lane == 0) s_vcount[grp * (kThreads / 32) + warp] = cnt_v;
  }
  // V8: N of the unscaled planes times 2^v_exp (as the v8 ring: exact while the product is a
  // normal float), before the cut pages' mass x mean V, which the page sums hold in real units.
  [[maybe_unused]] const float sx = V8 ? exp2i(v8_exponent(c, b, hk)) : 1.0f;
  __syncthreads();
  if constexpr (PAIR)
    if (grp != 0) return;  // (grp 0 writes the partial and the statistics)
  // The split's partial, as split_item's (the same products and sums in the same page order).
  const int64_t row0_end = s_row0;
  for (int e = tid; e < G * D; e += kThreads) {
    const int g = e / D, d = e % D;
    float cn = 0.0f;
    // (n_pages <= kPagesPerSplit; left alone, nvcc unrolled it 16 deep: ~140 instructions more.)
#pragma unroll 4
    for (int i = 0; i < n_pages; ++i)
      cn = add_rn(cn, mul_rn(page_cut[i * G + g], page_mean[i * D + d]));
    float nsum = 0.0f;
    for (int sl = 0; sl < pv_kparts(D); ++sl) nsum = add_rn(nsum, ns[(sl * D + d) * RS + g]);
    if constexpr (V8) nsum = mul_rn(nsum, sx);
    ws.part_n[((row0_end + g) * ws.splits + s) * D + d] = add_rn(nsum, cn);
  }
  for (int g = tid; g < G; g += kThreads) {
    float ct = 0.0f;
    for (int i = 0; i < n_pages; ++i) ct = add_rn(ct, page_cut[i * G + g]);
    ws.part_t[(row0_end + g) * ws.splits + s] = add_rn(ts[g], ct);
    ws.part_tl[(row0_end + g) * ws.splits + s] = add_rn(tlse[g], ct);
  }
  if (tid == 0) {
    // Keys: every key of [lo, s1) is present in exactly one (step, half, kq). Live and refined:
    // the threads' counts over four (each key counted by its four lanes).
    uint32_t sum = 0u, sum_v = 0u;
    for (int wi = 0; wi < NG * kThreads / 32; ++wi) sum += s_wcount[wi];
    if constexpr (V8)
      for (int wi = 0; wi < NG * kThreads / 32; ++wi) sum_v += s_vcount[wi];
    const int64_t n[4] = {s1 - lo, (sum & 0xffffu) >> 2, sum >> 18, sum_v >> 2};
    // (V8: plane A of V per live key, plane B per v-refined key, as split_item counts them.)
    const int64_t bytes = n[0] * (D + 2) + n[1] * (V8 ? D : 2 * D) + n[2] * D + n[3] * D +
                          static_cast<int64_t>(n_pages) * 4 * D;
    add_split_stats(c, ws, stats, pass, b, hk, n[0], n[1], n[2], n[3], bytes);
  }
}

// grid (splits, Hkv, B), 256 threads: pass 0's screened split at G <= 16 (split2_item), MINB
// blocks per SM (split2_plan and the launcher: the two halves' plane registers and the next
// step's need 106 / 120 at D 64 / 128 unbounded; D 64 fits 80 without spills, D 128 only with
// plane A in shared memory, SA).
// WIN: the grid covers the splits a window can touch (launch_decode), counted from the split of
// the request's first window key.
// PAIR: blocks of 2 kThreads threads (split2_item's two warp groups).
template <bool F16, int NP, int MINB, bool SA = false, bool WIDE = false, int RB = 1,
          bool V8 = false, bool WIN = false, bool PIPE = false, bool PAIR = false>
__global__ void __launch_bounds__(PAIR ? 2 * kThreads : kThreads, MINB)
    decode_split2_kernel(const DecodeCache c, const fold_decode_params_t p, const Ws ws,
                         int64_t *stats, const int32_t *lengths, const int l2pf) {
  int s = static_cast<int>(blockIdx.x);
  if constexpr (WIN) s += window_first(lengths[blockIdx.z], p.window_before) / kSplitKeys;
  // (split2_item waits for the front once its first loads are in flight.)
  split2_item<NP, SA, WIDE, RB, F16, V8, WIN, PIPE, PAIR>(c, p, ws, 0, stats, s, blockIdx.y,
                                                          blockIdx.z, lengths, l2pf);
  pdl_trigger();
}

using Split2Kernel = void (*)(const DecodeCache, const fold_decode_params_t, const Ws, int64_t *,
                              const int32_t *, int);

// The kernel instance of a plan (plan.on). Without SA: three blocks per SM at D 64 (80
// registers, no spills; 22% faster than two at large batch), two at D 128 (120 registers;
// capped for three it spilled 132 bytes and was 7-9% slower); FOLD_DECODE_SPLIT2_OCC=2 / 3
// forces one at G <= 4 (A/B runs; the same bits); D 64 G <= 4 at four blocks per SM (64
// registers; SA where the plan's `four` picks it) or FOLD_DECODE_SPLIT2_OCC=4 (either form; the
// v8 register form spills 16 bytes there). G 5-8: the wide form (no exchange); G 9-16:
// the wide form with two row blocks (FOLD_DECODE_SPLIT2_G16=0 runs split_item there).
template <bool F16, bool V8 = false, bool WIN = false>
inline Split2Kernel split2_kernel_dt(const Split2Plan &plan, int G, int D) {
  // PIPE (plan.pipe, not windowed): one block per SM, no register bound; the forms by G as below.
  if constexpr (!WIN) {
    // PAIR (plan.pair, not windowed): one block of two warp groups per SM, the forms by G.
    if (plan.pair) {
      if (G > 8)
        return D == 64 ? decode_split2_kernel<F16, 1, 1, false, true, 2, V8, false, false, true>
                       : decode_split2_kernel<F16, 2, 1, false, true, 2, V8, false, false, true>;
      if (G > 4)
        return D == 64 ? decode_split2_kernel<F16, 1, 1, false, true, 1, V8, false, false, true>
                       : decode_split2_kernel<F16, 2, 1, false, true, 1, V8, false, false, true>;
      return D == 64 ? decode_split2_kernel<F16, 1, 1, false, false, 1, V8, false, false, true>
                     : decode_split2_kernel<F16, 2, 1, false, false, 1, V8, false, false, true>;
    }
    if (plan.pipe) {
      if (G > 8)
        return D == 64 ? decode_split2_kernel<F16, 1, 1, false, true, 2, V8, false, true>
                       : decode_split2_kernel<F16, 2, 1, false, true, 2, V8, false, true>;
      if (G > 4)
        return D == 64 ? decode_split2_kernel<F16, 1, 1, false, true, 1, V8, false, true>
                       : decode_split2_kernel<F16, 2, 1, false, true, 1, V8, false, true>;
      return D == 64 ? decode_split2_kernel<F16, 1, 1, false, false, 1, V8, false, true>
                     : decode_split2_kernel<F16, 2, 1, false, false, 1, V8, false, true>;
    }
  }
  const char *occ = std::getenv("FOLD_DECODE_SPLIT2_OCC");
  const int occ_n = occ != nullptr ? std::atoi(occ) : 0;
  const bool three = occ_n == 3 || (occ_n != 2 && D == 64);
  if (G > 8)
    return D == 64 ? decode_split2_kernel<F16, 1, 2, false, true, 2, V8, WIN>
                   : decode_split2_kernel<F16, 2, 2, false, true, 2, V8, WIN>;
  if (G > 4) {
    if (D == 64)
      return plan.sa ? decode_split2_kernel<F16, 1, 3, true, true, 1, V8, WIN>
                     : decode_split2_kernel<F16, 1, 2, false, true, 1, V8, WIN>;
    return plan.sa ? decode_split2_kernel<F16, 2, 3, true, true, 1, V8, WIN>
                   : decode_split2_kernel<F16, 2, 2, false, true, 1, V8, WIN>;
  }
  if (plan.sa)
    return D == 64 ? (occ_n == 4 || plan.four
                          ? decode_split2_kernel<F16, 1, 4, true, false, 1, V8, WIN>
                          : decode_split2_kernel<F16, 1, 3, true, false, 1, V8, WIN>)
                   : decode_split2_kernel<F16, 2, 3, true, false, 1, V8, WIN>;
  if (D == 64)
    return occ_n == 4 ? decode_split2_kernel<F16, 1, 4, false, false, 1, V8, WIN>
           : three    ? decode_split2_kernel<F16, 1, 3, false, false, 1, V8, WIN>
                      : decode_split2_kernel<F16, 1, 2, false, false, 1, V8, WIN>;
  return three ? decode_split2_kernel<F16, 2, 3, false, false, 1, V8, WIN>
               : decode_split2_kernel<F16, 2, 2, false, false, 1, V8, WIN>;
}
// The instance of a plan for the cache's value format: fp16 or bf16 planes, or v8's E4M3 planes
// (bf16 weight operands), a template parameter.
// win: a windowed step's WIN instances.
template <bool WIN>
inline Split2Kernel split2_kernel_win(const Split2Plan &plan, int G, int D, bool f16, bool v8) {
  if (v8) return split2_kernel_dt<false, true, WIN>(plan, G, D);
  return f16 ? split2_kernel_dt<true, false, WIN>(plan, G, D)
             : split2_kernel_dt<false, false, WIN>(plan, G, D);
}
inline Split2Kernel split2_kernel(const Split2Plan &plan, int G, int D, bool f16, bool v8,
                                  bool win = false) {
  return win ? split2_kernel_win<true>(plan, G, D, f16, v8)
             : split2_kernel_win<false>(plan, G, D, f16, v8);
}

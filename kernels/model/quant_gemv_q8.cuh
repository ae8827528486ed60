// The product over weights kept in their GGUF blocks for steps of 1..8 rows
// with the inputs quantized to int8 and the dot products on dp4a (llama.cpp's
// MMVQ idea, written for this kernel's staging and epilogues). Included by
// skinny_gemm.cu after its kernels: it shares their staging (stage_input:
// bf16 rows, RMSNorm, the post-norm residual, the split-KV merge) and
// epilogue (store_unit: store, residual add, RoPE + K/V append, SwiGLU /
// GeGLU), so every fusion of the tile path holds here too.
//
//   w   : as skinny_gemm_quant_kernel (model_ops.h, SkinnyQuantWeights):
//         rows [row_begin, row_end) of the output space, or gate and up rows
//   in  : kTok = skinny_gemm_tokens(rows) rows staged as bf16 [kTok][k]
//         (the tiles' staging, the same rows bit for bit), then quantized in
//         place to int8 blocks of 32 (below)
//   out : store_unit's, for unit u = outputs (2u, 2u + 1) or gate/up row u
//
// Why: the tiles decode every weight to bf16 and feed the tensor cores
// (about 4 instructions a weight); at 1 row 15 of the mma's 16 columns are
// waste, and the tiles are bound by issue, far below DRAM speed
// (bench/TUNING.md#figures-moved-out-of-product-comments). Here a weight costs a quarter
// of a dp4a per input row plus its share of the unpacking (a mask and a
// shift per 4 weights), and a group of 32 costs one or two scale FMAs.
//
// Inputs: each 32-element block b of a staged row becomes
//   q[i] = round(x[i] · 127 / amax_b)  (int8),  d_b = amax_b / 127,
//   Σq over elements 0..15 and 16..31 (int16 each, for the offsets and mins)
// so Σ w·x over a weight group of scales a (a0, a1 for Q6_K's halves) and
// offset/min is d_b · (a · (Σ code·q − offset · Σq) + min · Σq): integer dot
// products, then float once per group. The error is that of the input
// rounding, |x − d·q| <= d/2 per element (tests/test_quant_gemv_q8_gpu.cpp
// bounds the product with it). Quantized here, per CTA, after the staging:
// every fused input (RMSNorm, the post-norm add, the split-KV merge) keeps
// working and no launch is added; the staging is what every CTA of the
// tiles pays already.
//
// In shared memory the int8 rows take the first half of the bf16 rows'
// bytes (rounds of one 2048-element window: each round reads its window's
// bf16 into registers, syncs, writes its int8 below them), then
// [kTok][k / 32] block scales and sums. Inside a window the blocks lie as
// the lanes read them: each lane's 16-byte loads are consecutive across the
// warp (no bank conflicts), see q8_slot.
//
// Grid: a warp computes a unit (two weight rows: RoPE's pair, or gate and
// up) for every input row, or two units where a row has at most 16 parts
// (q8_unit_lanes: a 1024-wide K-quant row would leave half the lanes idle),
// 16 lanes each. A unit's lanes split k: in one warp step lane j of L
// decodes part L·S + j of each row (quant_blocks.h: a 32-element block, or
// the two K-quant groups that share their bytes: one super-block per 4
// lanes, contiguous bytes across the warp). A warp takes units
// w, w + warps, ... (where a Q6_K launch has few units of many steps, wpu
// warps share them, q8_unit_warps: each takes every wpu-th step, and the
// first adds the others' sums in warp order before it stores) and, across
// units, has the next item's (unit, step) bytes in flight while it computes
// the current one (Q6_K in one-row steps: the next two items' bytes, copied
// into shared memory, see q8_stageable); the first item's bytes are
// requested before pdl_wait (q8_loads_early; the weights do not depend on
// the kernel before). At a unit's last step its lanes' sums are reduced by
// shuffles (a fixed order: results do not depend on the grid) and lane t
// of the unit stores input row t. CTAs of 16 warps, one an SM (quant_gemv_q8_warps:
// each CTA stages and quantizes the whole input, so the wide CTA gives each
// thread the least of it), or of 4, kQ8CtasPerSm an SM; fewer CTAs when
// there are fewer units.
//
// Taken by launch_skinny_gemm for rows <= quant_gemv_q8_max_rows(), before
// the other GEMV and the tiles: the environment's FLASHSCOPE_QUANT_GEMV=q8
// (1..8 rows) or q8:N (a number there selects the other GEMV and turns this
// one off; unset: kQuantGemvQ8DefaultRows), or set_quant_gemv_q8_max_rows
// (tests, bench/quant_gemm_sweep.cu).

namespace {

#ifndef FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM
#define FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM 4
#endif
constexpr int kQ8CtasPerSm = FLASHSCOPE_QUANT_GEMV_Q8_CTAS_PER_SM;
constexpr int kQ8Window = 2048;                          // elements of a quantization round (a K-quant warp step)
constexpr int kQ8WindowGroups = kQ8Window / quant::kGroup;  // 64

// A block's scale and its element sums: sums = Σq[0..15] in the low 16 bits, Σq[16..31] in the high (signed).
struct Q8Meta {
  float d;
  int sums;
};

constexpr size_t q8_smem_bytes(int tok, int k) {
  return size_t(tok) * k * sizeof(uint16_t) + size_t(tok) * (k / quant::kGroup) * sizeof(Q8Meta);
}

// Where group gi of a window of wg groups lies: slot s, its first 16 bytes
// at 16·s and its last 16 at 16·(wg + s) from the window's start, its scale
// at s. The 32-element types: the group itself (lane j of a warp step reads
// group j of its half window). K-quants: lane j of a warp step decodes part
// j, groups sub = 0 and 1 of it; slot sub·(wg/2) + j puts the 32 lanes' loads
// of one sub side by side.
template <int T>
__device__ __forceinline__ int q8_slot(int gi, int wg) {
  if constexpr (quant::part_groups(T) == 1) {
    return gi;
  } else {
    const quant::PartOfGroup at = quant::part_of_group(T, gi);
    return at.sub * (wg / 2) + 4 * at.step + at.part;
  }
}

// The staged bf16 rows x_smem [kTok][k] → int8 blocks in place (layout above).
// A round reads its windows' bf16 into registers, syncs, then writes their
// int8: window w's int8 lands on the bf16 of window w / 2, read in this round
// or an earlier one. 256 chunks a window: two a thread at 128 threads; wider
// CTAs take kCtaThreads / 256 windows a round, one chunk a thread.
template <int kTok, int kType, int kCtaThreads>
__device__ void quantize_staged(uint4* x_smem, int k) {
  uint8_t* bytes = reinterpret_cast<uint8_t*>(x_smem);
  Q8Meta* meta = reinterpret_cast<Q8Meta*>(bytes + size_t(kTok) * k * sizeof(uint16_t));
  const int groups = k / quant::kGroup;
  constexpr int kWindowChunks = kQ8Window / kChunkElems;  // 256
  constexpr int kIters = kCtaThreads >= kWindowChunks ? 1 : kWindowChunks / kCtaThreads;
  constexpr int kRoundWindows = kCtaThreads >= kWindowChunks ? kCtaThreads / kWindowChunks : 1;
  static_assert(kIters * kCtaThreads == kRoundWindows * kWindowChunks, "a round is whole windows");
  for (int t = 0; t < kTok; ++t) {
    for (int r0 = 0; r0 < k; r0 += kRoundWindows * kQ8Window) {
      uint4 v[kIters];
      int w0[kIters], wg[kIters], c[kIters];
#pragma unroll
      for (int j = 0; j < kIters; ++j) {
        const int rc = j * kCtaThreads + threadIdx.x;  // the round's chunk
        w0[j] = r0 + rc / kWindowChunks * kQ8Window;
        c[j] = rc % kWindowChunks;
        wg[j] = w0[j] < k ? min(kQ8WindowGroups, (k - w0[j]) / quant::kGroup) : 0;
        v[j] = c[j] < 4 * wg[j] ? x_smem[(t * k + w0[j]) / kChunkElems + c[j]] : make_uint4(0u, 0u, 0u, 0u);
      }
      __syncthreads();  // the round's bf16 is read before its int8 overwrites it
#pragma unroll
      for (int j = 0; j < kIters; ++j) {
        // chunk c: quarter c % 4 of group c / 4 of its window (4 lanes a group)
        const uint32_t w[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        float f[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          f[2 * i] = bf16_lo(w[i]);
          f[2 * i + 1] = bf16_hi(w[i]);
        }
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        int q[8], sum = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          q[i] = __float2int_rn(f[i] * inv);
          sum += q[i];
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);            // quarters 0+1 (elements 0..15), 2+3 (16..31)
        const int sum_hi = __shfl_xor_sync(0xffffffffu, sum, 2);  // at quarter 0: the other half's
        if (c[j] >= 4 * wg[j]) continue;
        const int e0 = t * k + w0[j];  // the window's first element in the flattened rows
        const int gi = c[j] / 4, quarter = c[j] % 4;
        const int slot = q8_slot<kType>(gi, wg[j]);
        const uint32_t lo = uint32_t(q[0] & 0xFF) | uint32_t(q[1] & 0xFF) << 8 | uint32_t(q[2] & 0xFF) << 16 |
                            uint32_t(q[3] & 0xFF) << 24;
        const uint32_t hi = uint32_t(q[4] & 0xFF) | uint32_t(q[5] & 0xFF) << 8 | uint32_t(q[6] & 0xFF) << 16 |
                            uint32_t(q[7] & 0xFF) << 24;
        uint8_t* dst = bytes + e0 + 16 * ((quarter / 2) * wg[j] + slot) + 8 * (quarter % 2);
        *reinterpret_cast<uint2*>(dst) = make_uint2(lo, hi);
        if (quarter == 0)
          meta[t * groups + w0[j] / quant::kGroup + slot] = {amax / 127.0f,
                                                             int((uint32_t(sum) & 0xFFFFu) | (uint32_t(sum_hi) << 16))};
      }
    }
  }
}

// Q4_K's sub 1 (the high nibbles) is dotted in place, 16 times its codes,
// its scale a sixteenth: a shift fewer a quad, and the same float (the
// integer sum stays below 2^24, and a/16 · 16n rounds as a · n).
template <int T>
__device__ __forceinline__ constexpr bool q8_high_in_place(int sub) {
  return T == quant::kQ4_K && sub == 1;
}

// A group's codes for dp4a, element 4·quad + i in byte i: quad_codes (0..63,
// q = code − offset; Q4_K's sub 1: 16·code), or Q8_0's int8 q as they lie.
template <int T>
__device__ __forceinline__ uint32_t q8_codes(const quant::PartBytes& b, int part, int sub, int quad) {
  if constexpr (T == quant::kQ8_0) {
    return b.qs[quad];
  } else {
    if (q8_high_in_place<T>(sub)) return b.qs[quad] & 0xF0F0F0F0u;
    return quant::quad_codes<T>(b, part, sub, quad);
  }
}

// Σ a_i · b_i + c over the four bytes, a signed (Q8_0) or not (the codes).
template <int T>
__device__ __forceinline__ int q8_dp4a(uint32_t a, uint32_t b, int c) {
  int d;
  if constexpr (T == quant::kQ8_0) {
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
}
template <int T>
__device__ __forceinline__ constexpr int q8_offset() {
  return T == quant::kQ4_0 ? 8 : T == quant::kQ5_0 ? 16 : T == quant::kQ6_K ? 32 : 0;
}

// acc[r][t] += weight row r's group `sub` of part `part` (bytes b[r]) · input row t's block g, t < rows.
//   xq: the window's int8 bytes for input row 0 (row t at + t·k), at its slot; half: 16·wg
//   meta: the block's Q8Meta for input row 0 (row t at + t·groups)
template <int kTok, int T>
__device__ __forceinline__ void q8_group(const quant::PartBytes (&b)[2], int part, int sub, const uint8_t* xq,
                                         int half, const Q8Meta* meta, int k, int groups, int rows,
                                         float (&acc)[2][kTok]) {
  uint32_t c[2][8];
  quant::GroupScales s[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    s[r] = quant::part_scales<T>(b[r], part, sub);
    if (q8_high_in_place<T>(sub)) s[r].a0 *= 0.0625f;
#pragma unroll
    for (int quad = 0; quad < 8; ++quad) c[r][quad] = q8_codes<T>(b[r], part, sub, quad);
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t >= rows) break;  // the zero rows that pad a step to kTok (uniform over the warp)
    const uint4 x0 = *reinterpret_cast<const uint4*>(xq + size_t(t) * k);
    const uint4 x1 = *reinterpret_cast<const uint4*>(xq + size_t(t) * k + half);
    const Q8Meta m = meta[t * groups];
    const int s_lo = int(uint32_t(m.sums) << 16) >> 16, s_hi = m.sums >> 16;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int lo = q8_dp4a<T>(c[r][0], x0.x, 0);
      lo = q8_dp4a<T>(c[r][1], x0.y, lo);
      lo = q8_dp4a<T>(c[r][2], x0.z, lo);
      lo = q8_dp4a<T>(c[r][3], x0.w, lo);
      int hi = q8_dp4a<T>(c[r][4], x1.x, 0);
      hi = q8_dp4a<T>(c[r][5], x1.y, hi);
      hi = q8_dp4a<T>(c[r][6], x1.z, hi);
      hi = q8_dp4a<T>(c[r][7], x1.w, hi);
      constexpr int kOff = q8_offset<T>();
      float v;
      if constexpr (T == quant::kQ6_K) {
        v = s[r].a0 * float(lo - kOff * s_lo) + s[r].a1 * float(hi - kOff * s_hi);
      } else if constexpr (T == quant::kQ4_1 || T == quant::kQ5_1 || T == quant::kQ4_K || T == quant::kQ5_K) {
        v = fmaf(s[r].a0, float(lo + hi), s[r].b * float(s_lo + s_hi));
      } else {
        v = s[r].a0 * float(lo + hi - kOff * (s_lo + s_hi));
      }
      acc[r][t] = fmaf(m.d, v, acc[r][t]);
    }
  }
}

// Units a warp requests into L2 before it waits for the kernel before it.
constexpr int kQ8PrefetchUnits = 2;

// Whether a warp loads its first item's bytes into registers before that
// wait (so they arrive during the wait and the input's staging, not after):
// one-row steps of every type but Q5_K and Q6_K, whose plain kernels spill
// holding them (Q6_K's one-row kernel copies its first items into shared
// memory instead), as the wider steps' kernels spill more
// (bench/TUNING.md#engine).
template <int T, int kTok>
constexpr bool q8_loads_early() {
  return kTok == 1 && T != quant::kQ5_K && T != quant::kQ6_K;
}

// A row's bytes requested into L2, one 128-byte line a lane at a time.
__device__ __forceinline__ void prefetch_row_l2(const uint8_t* row, int64_t bytes, bool has) {
  if (!has) return;
  const uintptr_t end = reinterpret_cast<uintptr_t>(row) + uintptr_t(bytes);
  for (uintptr_t a = (reinterpret_cast<uintptr_t>(row) & ~uintptr_t(127)) + 128 * (threadIdx.x % 32); a < end;
       a += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

// Lanes of a warp a unit's parts are spread over, from the shape alone (the
// sums and their order do not depend on the device or the CTA width): 32,
// or 16 where a row has at most 16 parts (a 1024-wide K-quant row: two units
// a warp, none of its lanes idle).
__host__ __device__ constexpr int q8_unit_lanes(int parts) { return parts <= 16 ? 16 : 32; }
// Parts of a k-wide row of type T (quant_blocks.h: a lane's bytes of a step).
template <int T>
__host__ __device__ constexpr int q8_row_parts(int k) {
  return k / quant::kGroup / quant::part_groups(T);
}

// Warps that share a unit's warp steps, each taking every wpu-th step, their
// sums added through shared memory in warp order: 1, or 2, 4, ... while the
// row has the steps and the launch's warps stay within kQ8SplitWarps; at
// most 4, the narrower CTA's width. Why: a Q6_K down product of a 1B (1024
// units of four steps) would otherwise fill 64 of 132 SMs. Q6_K rows only
// (q8_splits): split so, its launches measured faster and the other types'
// slower (bench/TUNING.md#engine). From the type and shape alone,
// so the sums' order is the same on every device, grid, CTA width and row
// count.
constexpr int kQ8SplitWarps = 2048;  // about the warps that fill an H100 or H200 (132 SMs of 16)
constexpr int kQ8MaxUnitWarps = 4;
__host__ __device__ constexpr int q8_unit_warps(int unit_warps, int wsteps) {
  int w = 1;
  while (2 * w <= wsteps && 2 * w <= kQ8MaxUnitWarps && int64_t(unit_warps) * 2 * w <= kQ8SplitWarps) w *= 2;
  return w;
}

template <int T>
__host__ __device__ constexpr bool q8_splits() {
  return T == quant::kQ6_K;
}

// kWarpsQ8 warps a CTA: 4, or 16 (one CTA an SM), where each CTA's staging
// and quantization of the input, which every CTA repeats, is a quarter as
// many instructions a thread.
template <int kWarpsQ8>
constexpr int q8_min_ctas() {
  return kWarpsQ8 >= 16 ? 1 : kQ8CtasPerSm;
}

// Q6_K's parts come through shared memory in one-row steps: each warp copies
// its items' row segments there with coalesced 16-byte cp.async, kQ8Stages − 1
// items ahead, and its lanes read their parts from the copy. Why: a Q6_K
// super-block is 210 bytes, so a lane's part is 2-byte aligned and came in
// about twenty 4-byte loads a row, each of a warp's spread over a dozen cache
// lines: the load/store unit, not DRAM, set the pace of the Q6_K launches
// (a Q4_K_M file's LM head among them; bench/TUNING.md#engine). The copy is
// 4 instructions a row segment, its shared reads conflict-free (the lanes'
// 210-byte strides fall on distinct banks). The wider steps' input rows
// leave no room for the stages (k = 8192 at 8 rows: 147 KiB).
//   stage: up to 4 row segments (two units of 16 lanes: 4 super-blocks a row;
//          one unit of 32 lanes: 2 rows of 8), each padded for its copy's
//          16-byte alignment: a segment starting at byte b of the row lies at
//          b % 16 of its slot.
constexpr int kQ8Stages = 3;
constexpr int kQ6KBlockBytes = quant::block_bytes(quant::kQ6_K);
__host__ __device__ constexpr int q8_stage_slot_bytes(int ul) { return (ul / 4 * kQ6KBlockBytes + 32 + 15) / 16 * 16; }
constexpr int kQ8StageBytes = 4 * q8_stage_slot_bytes(16) > 2 * q8_stage_slot_bytes(32) ? 4 * q8_stage_slot_bytes(16)
                                                                                         : 2 * q8_stage_slot_bytes(32);
template <int T, int kTok>
constexpr bool q8_stageable() {
  return T == quant::kQ6_K && kTok == 1;
}
// The staged kernel's shared memory: the input's, rounded to 16 bytes, then each warp's stages.
constexpr size_t q8_staged_smem_bytes(int tok, int k, int warps) {
  return (q8_smem_bytes(tok, k) + 15) / 16 * 16 + size_t(warps) * kQ8Stages * kQ8StageBytes;
}

// 4·N bytes at a 2-byte aligned shared address as N little-endian words
// (quant::load_words_a2 for shared memory: one aligned load more, shifted).
template <int N>
__device__ __forceinline__ void lds_words_a2(uint32_t addr, uint32_t (&w)[N]) {
  const uint32_t base = addr & ~3u, shift = (addr & 3u) * 8;
  uint32_t prev = lds_u32(base);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t next = lds_u32(base + 4 * (i + 1));
    w[i] = __funnelshift_r(prev, next, shift);
    prev = next;
  }
}

// quant::load_part<kQ6_K> of the super-block at shared address sb: the same words.
__device__ __forceinline__ void q6k_part_from_smem(uint32_t sb, int part, quant::PartBytes& b) {
  const int h = part / 2, r0 = part % 2;
  lds_words_a2(sb + 32 * part, b.qs);  // ql: 64h + 32r0
  lds_words_a2(sb + 128 + 32 * h, b.qh);
  b.head[1] = lds_u16(sb + 192 + 8 * h + 2 * r0) | (lds_u16(sb + 192 + 8 * h + 2 * r0 + 4) << 16);
  b.head[0] = lds_u16(sb + 208);
}

template <int kTok, int kType, int kWarpsQ8, bool kStaged>
__global__ void __launch_bounds__(kWarpsQ8 * 32, q8_min_ctas<kWarpsQ8>())
    quant_gemv_q8_kernel(const __grid_constant__ SkinnyGemmKernelParams p) {
  extern __shared__ uint4 x_smem[];  // bf16 [kTok][k] staged, then int8 [kTok][k] over its first half; Q8Meta after
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kc = p.k / kChunkElems;
  const int groups = p.k / quant::kGroup;
  constexpr int kPartGroups = quant::part_groups(kType);
  const int parts = q8_row_parts<kType>(p.k);
  const bool swiglu = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int units = swiglu ? p.n_out : (p.wq.row_end - p.wq.row_begin + 1) / 2;
  const int ul = q8_unit_lanes(parts);
  const int wsteps = ceil_div(parts, ul);  // warp steps of a row
  const int lane_unit = lane / ul, lane_part = lane % ul;  // the lane's unit of the warp's, and its part in a step
  const int units_per_warp = 32 / ul;
  constexpr bool kSplit = q8_splits<kType>();
  const int wpu = kSplit ? q8_unit_warps(ceil_div(units, units_per_warp), wsteps) : 1;  // warps a unit
  const int group = warp / wpu, sub = warp % wpu;  // the warp's units of the CTA's, and its share of their steps
  const int unit_stride = int(gridDim.x) * (kWarpsQ8 / wpu) * units_per_warp;
  // kSplit: a warp's sums [lane_unit][input row], its unit's rows 0 and 1
  __shared__ float2 partial_smem[kSplit ? kWarpsQ8 : 1][2][kTok];

  struct Item {
    int unit, ws;  // the warp's first unit, and the warp step of its rows
  };
  auto advance = [&](Item it) {
    it.ws += wpu;
    if (it.ws >= wsteps) {
      it.ws = sub;
      it.unit += unit_stride;
    }
    return it;
  };
  auto unit_of = [&](int unit) { return quant_unit(p, swiglu, unit / kTileUnits, unit % kTileUnits); };
  // Lane's part ul·ws + lane_part of its unit's rows (zeros for a unit, row or part that does not exist).
  auto load = [&](const Item& it, quant::PartBytes (&b)[2]) {
    b[0] = quant::PartBytes{};
    b[1] = quant::PartBytes{};
    const int j = ul * it.ws + lane_part, unit = it.unit + lane_unit;
    if (unit >= units || j >= parts) return;
    load_unit_part<kType>(unit_of(unit), j / 4, j % 4, true, b);
  };

  // kStaged: this warp's stages (shared addresses), the item each holds
  // copied by every lane of the warp (rows that do not exist are not read;
  // an item past the last is an empty group, so a wait counts items).
  const int slot_bytes = q8_stage_slot_bytes(ul);
  const uint32_t stages = smem_addr(x_smem) + uint32_t((q8_smem_bytes(kTok, p.k) + 15) / 16 * 16) +
                          uint32_t(warp * kQ8Stages * kQ8StageBytes);
  auto segment = [&](const Item& item, const uint8_t* row) {
    return row + int64_t(ul * item.ws / 4) * kQ6KBlockBytes;  // the item's first super-block of the row
  };
  auto stage_item = [&](const Item& item, int stage) {
    const int bytes = min(ul, parts - ul * item.ws) / 4 * kQ6KBlockBytes;
    for (int u = 0; u < units_per_warp && item.unit + u < units; ++u) {
      const QuantUnit q = unit_of(item.unit + u);
      for (int r = 0; r < 2; ++r) {
        if (!(r == 0 ? q.rows.has0 : q.rows.has1)) continue;
        const uintptr_t src = reinterpret_cast<uintptr_t>(segment(item, r == 0 ? q.w0 : q.w1));
        const uintptr_t first = src & ~uintptr_t(15);
        const int chunks = int((src + bytes + 15 - first) / 16);
        const uint32_t dst = stages + uint32_t(stage * kQ8StageBytes + (2 * u + r) * slot_bytes);
        for (int c = lane; c < chunks; c += 32)
          cp_async_16(dst + 16 * c, reinterpret_cast<const void*>(first + 16 * c), true);
      }
    }
    cp_async_commit();
  };

  // The weights do not depend on the kernel before this one: the warp's
  // first item is loaded into registers where the type allows it
  // (q8_loads_early: held across the staging below) and its first
  // kQ8PrefetchUnits units requested into L2, or its first stages copied,
  // then that kernel's outputs waited for.
  Item it = {(int(blockIdx.x) * (kWarpsQ8 / wpu) + group) * units_per_warp, sub};
  Item staged = it;  // the next item to copy
  quant::PartBytes cur[2], nxt[2];
  if constexpr (!kStaged && q8_loads_early<kType, kTok>()) load(it, cur);
  if constexpr (kStaged) {
    for (int s = 0; s < kQ8Stages - 1; ++s) {
      stage_item(staged, s);
      staged = advance(staged);
    }
  } else {
    for (int i = 0; i < kQ8PrefetchUnits * units_per_warp; ++i) {
      const int unit = it.unit + (i / units_per_warp) * unit_stride + i % units_per_warp;
      if (unit >= units) break;
      const QuantUnit u = unit_of(unit);
      for (int ws = sub; ws < wsteps; ws += wpu) {  // the row, or this warp's steps of it
        const int64_t b0 = wpu == 1 ? 0 : p.wq.row_bytes * (ul * ws) / parts;
        const int64_t b1 = wpu == 1 ? p.wq.row_bytes : p.wq.row_bytes * min(parts, ul * (ws + 1)) / parts;
        prefetch_row_l2(u.w0 + b0, b1 - b0, u.rows.has0);
        prefetch_row_l2(u.w1 + b0, b1 - b0, u.rows.has1);
        if (wpu == 1) break;
      }
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  // Lane t of a unit's lanes: the epilogue inputs for input row t, requested before they are needed.
  EpilogueInputs epi;
  auto load_epi = [&](int warp_unit) {
    const int unit = warp_unit + lane_unit;
    if (sub != 0 || swiglu || unit >= units || lane_part >= kTok || lane_part >= p.rows) return;
    const UnitRows r = unit_of(unit).rows;
    epi = load_epilogue_inputs(p, lane_part, r.row0, r.has1);
  };
  load_epi(it.unit);
  stage_input<kTok, true, kWarpsQ8 * 32>(p, x_smem, kc);
  __syncthreads();  // every row is staged before it is quantized
  quantize_staged<kTok, kType, kWarpsQ8 * 32>(x_smem, p.k);
  __syncthreads();  // every block is quantized before any warp reads one
  const uint8_t* xq = reinterpret_cast<const uint8_t*>(x_smem);
  const Q8Meta* meta = reinterpret_cast<const Q8Meta*>(xq + size_t(kTok) * p.k * sizeof(uint16_t));
  if constexpr (!kStaged && !q8_loads_early<kType, kTok>()) load(it, cur);
  // kStaged: the lane's parts of the item in stage `stage` into cur.
  auto read_staged = [&](const Item& item, int stage) {
    cur[0] = quant::PartBytes{};
    cur[1] = quant::PartBytes{};
    const int j = ul * item.ws + lane_part, unit = item.unit + lane_unit;
    if (unit >= units || j >= parts) return;
    const QuantUnit q = unit_of(unit);
    const uint32_t slot = stages + uint32_t(stage * kQ8StageBytes + 2 * lane_unit * slot_bytes + lane_part / 4 * kQ6KBlockBytes);
    auto in_slot = [&](const uint8_t* row) { return uint32_t(reinterpret_cast<uintptr_t>(segment(item, row)) & 15); };
    if (q.rows.has0) q6k_part_from_smem(slot + in_slot(q.w0), j % 4, cur[0]);
    if (q.rows.has1) q6k_part_from_smem(slot + slot_bytes + in_slot(q.w1), j % 4, cur[1]);
  };
  int stage = 0;  // kStaged: the stage holding item `it`

  float acc[2][kTok];
#pragma unroll
  for (int t = 0; t < kTok; ++t) acc[0][t] = acc[1][t] = 0.0f;
  while (it.unit < units) {
    const Item next = advance(it);
    if constexpr (kStaged) {
      __syncwarp();  // every lane has read the stage the copy below refills (the previous item's)
      stage_item(staged, (stage + kQ8Stages - 1) % kQ8Stages);
      staged = advance(staged);
      cp_async_wait<kQ8Stages - 1>();  // this lane's copies of item `it` are in
      __syncwarp();                    // and every lane's
      read_staged(it, stage);
      stage = (stage + 1) % kQ8Stages;
    } else {
      load(next, nxt);
    }
    const int j = ul * it.ws + lane_part;
    if (j < parts) {
#pragma unroll
      for (int sub = 0; sub < kPartGroups; ++sub) {
        const int g = quant::part_group(kType, j / 4, j % 4, sub);
        const int w = g / kQ8WindowGroups;
        const int wg = min(kQ8WindowGroups, groups - w * kQ8WindowGroups);
        const int slot = q8_slot<kType>(g % kQ8WindowGroups, wg);
        q8_group<kTok, kType>(cur, j % 4, sub, xq + w * kQ8Window + 16 * slot, 16 * wg,
                              meta + w * kQ8WindowGroups + slot, p.k, groups, p.rows, acc);
      }
    }
    if (it.ws + wpu >= wsteps) {  // the warp's last step of its units: reduce, lane t of a unit stores row t
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t >= p.rows) break;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
          if (offset >= ul) continue;
          acc[0][t] += __shfl_xor_sync(0xffffffffu, acc[0][t], offset);
          acc[1][t] += __shfl_xor_sync(0xffffffffu, acc[1][t], offset);
        }
      }
      if (kSplit && wpu > 1) {  // the other warps' sums to the first, added in warp order
        if (sub != 0) {
#pragma unroll
          for (int t = 0; t < kTok; ++t)
            if (lane_part == t) partial_smem[warp][lane_unit][t] = make_float2(acc[0][t], acc[1][t]);
        }
        named_barrier_sync(1 + group, 32 * wpu);  // the unit's warps
        if (sub == 0) {
          for (int s = 1; s < wpu; ++s) {
#pragma unroll
            for (int t = 0; t < kTok; ++t) {
              if (lane_part != t) continue;
              const float2 v = partial_smem[warp + s][lane_unit][t];
              acc[0][t] += v.x;
              acc[1][t] += v.y;
            }
          }
        }
        named_barrier_sync(1 + group, 32 * wpu);  // read before the next units' sums are written
      }
      const int unit = it.unit + lane_unit;
      const UnitRows rows = unit_of(unit).rows;
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (sub == 0 && lane_part == t && t < p.rows && unit < units) store_unit(p, t, rows, acc[0][t], acc[1][t], epi);
        acc[0][t] = acc[1][t] = 0.0f;
      }
      load_epi(next.unit);
    }
    if constexpr (!kStaged) {
      cur[0] = nxt[0];
      cur[1] = nxt[1];
    }
    it = next;
  }
  if constexpr (kStaged) cp_async_wait<0>();  // no copy outlives the CTA's shared memory
}

template <int kTok, int kType, int kWarpsQ8, bool kStaged>
cudaError_t launch_gemv_q8_kernel(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  const bool gated_units = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int units = gated_units ? p.n_out : (p.wq.row_end - p.wq.row_begin + 1) / 2;
  const size_t smem = kStaged ? q8_staged_smem_bytes(kTok, p.k, kWarpsQ8) : q8_smem_bytes(kTok, p.k);
  auto kernel = quant_gemv_q8_kernel<kTok, kType, kWarpsQ8, kStaged>;
  if (smem + kQuantStaticSmem > 48 * 1024) {
    const cudaError_t e = opt_in_dynamic_smem<quant_gemv_q8_kernel<kTok, kType, kWarpsQ8, kStaged>>(
        int(kStaged ? quant_smem_optin() : skinny_gemm_quant_smem_limit()));
    if (e != cudaSuccess) return e;
  }
  // Up to q8_min_ctas CTAs an SM (fewer where the shared memory or
  // registers allow fewer), none without a unit to compute.
  const int ctas = resident_ctas(kernel, smem, p.sm_count, q8_min_ctas<kWarpsQ8>());
  const int parts = q8_row_parts<kType>(p.k), ul = q8_unit_lanes(parts);
  const int unit_warps = ceil_div(units, 32 / ul);
  const int warps = unit_warps * (q8_splits<kType>() ? q8_unit_warps(unit_warps, ceil_div(parts, ul)) : 1);
  return launch_maybe_programmatic(kernel, dim3(std::max(1, std::min(ceil_div(warps, kWarpsQ8), ctas))),
                                   dim3(kWarpsQ8 * 32), smem, stream, programmatic, p);
}

// The staged kernel where the type has one and its shared memory fits the device, else the plain one.
template <int kTok, int kType, int kWarpsQ8>
cudaError_t launch_gemv_q8(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  if constexpr (q8_stageable<kType, kTok>()) {
    if (q8_staged_smem_bytes(kTok, p.k, kWarpsQ8) <= quant_smem_optin())
      return launch_gemv_q8_kernel<kTok, kType, kWarpsQ8, true>(p, stream, programmatic);
  }
  return launch_gemv_q8_kernel<kTok, kType, kWarpsQ8, false>(p, stream, programmatic);
}

template <int kTok, int kWarpsQ8>
cudaError_t launch_gemv_q8_tokens(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  switch (p.wq.type) {
    case quant::kQ4_0: return launch_gemv_q8<kTok, quant::kQ4_0, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ4_1: return launch_gemv_q8<kTok, quant::kQ4_1, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ5_0: return launch_gemv_q8<kTok, quant::kQ5_0, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ5_1: return launch_gemv_q8<kTok, quant::kQ5_1, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ8_0: return launch_gemv_q8<kTok, quant::kQ8_0, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ4_K: return launch_gemv_q8<kTok, quant::kQ4_K, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ5_K: return launch_gemv_q8<kTok, quant::kQ5_K, kWarpsQ8>(p, stream, programmatic);
    case quant::kQ6_K: return launch_gemv_q8<kTok, quant::kQ6_K, kWarpsQ8>(p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

// FLASHSCOPE_QUANT_GEMV_Q8_WARPS, or what set_quant_gemv_q8_warps set.
EnvSwitch g_quant_gemv_q8_warps;

template <int kWarpsQ8>
cudaError_t launch_gemv_q8_warps(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  switch (skinny_gemm_tokens(p.rows)) {
    case 1: return launch_gemv_q8_tokens<1, kWarpsQ8>(p, stream, programmatic);
    case 2: return launch_gemv_q8_tokens<2, kWarpsQ8>(p, stream, programmatic);
    case 4: return launch_gemv_q8_tokens<4, kWarpsQ8>(p, stream, programmatic);
    default: return launch_gemv_q8_tokens<8, kWarpsQ8>(p, stream, programmatic);
  }
}

cudaError_t launch_quant_gemv_q8(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  return quant_gemv_q8_warps() == 4 ? launch_gemv_q8_warps<4>(p, stream, programmatic)
                                    : launch_gemv_q8_warps<16>(p, stream, programmatic);
}

// FLASHSCOPE_QUANT_GEMV's q8 rows, or what set_quant_gemv_q8_max_rows set.
EnvSwitch g_quant_gemv_q8_rows;
// One-row steps (a session's decode): there the int8 GEMV beats the tiles
// end to end; from two rows on its cost grows with the rows while the
// tiles' stays flat (bench/TUNING.md#engine).
constexpr int kQuantGemvQ8DefaultRows = 1;

// Whether a step of `rows` rows of k takes this kernel: the rows the switch
// allows, and its shared memory within what the device lets a CTA have.
bool quant_gemv_q8_takes(int rows, int k) {
  return rows <= quant_gemv_q8_max_rows() &&
         q8_smem_bytes(skinny_gemm_tokens(rows), k) <= skinny_gemm_quant_smem_limit();
}

}  // namespace

int quant_gemv_q8_max_rows() {
  return g_quant_gemv_q8_rows.get([] {
    // Set at all, the variable decides: q8 (every few-row step), q8:N, or a
    // number (the other GEMV's rows, quant_gemv.cuh: this one off, so =0 is
    // the tiles whatever the default).
    const char* env = std::getenv("FLASHSCOPE_QUANT_GEMV");
    if (env == nullptr || *env == '\0') return kQuantGemvQ8DefaultRows;
    if (env[0] == 'q' && env[1] == '8' && env[2] == '\0') return kSkinnyMaxRows;
    if (env[0] == 'q' && env[1] == '8' && env[2] == ':') {
      char* end = nullptr;
      const long v = std::strtol(env + 3, &end, 10);
      if (end != env + 3 && *end == '\0') return int(std::clamp<long>(v, 0, kSkinnyMaxRows));
    }
    return 0;
  });
}

void set_quant_gemv_q8_max_rows(int rows) { g_quant_gemv_q8_rows.set(std::clamp(rows, 0, kSkinnyMaxRows)); }

int quant_gemv_q8_warps() {
  return g_quant_gemv_q8_warps.get([] {
    const char* env = std::getenv("FLASHSCOPE_QUANT_GEMV_Q8_WARPS");
    return env != nullptr && std::strcmp(env, "4") == 0 ? 4 : 16;
  });
}

void set_quant_gemv_q8_warps(int warps) { g_quant_gemv_q8_warps.set(warps == 4 ? 4 : 16); }

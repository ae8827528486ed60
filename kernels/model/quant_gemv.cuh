// The product over weights kept in their GGUF blocks for steps of 1 or 2
// rows (a decode step of one or two sequences), where skinny_gemm_quant_kernel's
// tiles of 16 weight rows leave the GPU idle. Included by skinny_gemm.cu
// after its kernels: it shares their staging (stage_input: bf16 rows,
// RMSNorm, the split-KV merge) and epilogue (store_unit: store, residual
// add, RoPE + K/V append, SwiGLU / GeGLU).
//
//   w   : as skinny_gemm_quant_kernel (model_ops.h, SkinnyQuantWeights): rows
//         [row_begin, row_end) of the output space, or gate and up rows
//   in  : rows <= 2, staged as 2 rows x [2, k] bf16 (a missing row is zeros),
//         then interleaved a 32-bit word at a time: shared memory 8·k bytes
//   out : store_unit's, for unit u = outputs (2u, 2u + 1) or gate/up row u
//
// Why a second kernel: at 1 row the tiles of 16 rows gave too few warps
// (Qwen3-0.6B's down, 1024 x 3072: 64 CTAs of 4 warps on 132 SMs, 3 steps
// each) and each lane decoded two rows after its bytes arrived.
//
// Tile: 4 units = 8 weight rows, the n of an mma.m16n8k16 whose B is the
// weights and whose A is the tokens: rows 0 and 8 of A are tokens 0 and 1
// (the other rows repeat them; nobody reads their products). Lane (g, c) =
// (lane / 4, lane % 4) decodes weight row g (unit g / 2, its row g % 2) at
// part c of each step (quant_blocks.h: a 32-element block, or the two
// K-quant groups that share their bytes), a quad of 4 elements per mma:
// quad_codes masks a word of codes, quad_q turns each into q with one byte
// permute, group_value forms a·q + b and pack_bf16x2 rounds it as
// dequantize_bf16 does: the many-row path's weights, so both paths
// multiply by the same numbers. The k order inside an mma is free as long
// as A and B agree: slots 2c, 2c + 1, 2c + 8, 2c + 9 are elements 4·quad ..
// 4·quad + 3 of lane c's part for B (row g) and A alike. A's fragment is
// one 16-byte load of the interleaved rows (token 0's word, token 1's, the
// next two), so no moves build it. Lane (0, c) ends with unit c's two rows
// for both tokens.
//
// Grid: as many CTAs as the device holds at once, up to one per tile; a
// CTA takes tiles blockIdx.x, + gridDim.x, ... (the input staged once);
// its 4 warps split a tile's steps (warp w: steps w, w + 4, ...). A warp's
// (tile, step) items are one sequence whose next kGemvAhead items' bytes
// are in flight while it decodes one (across tiles too); the first are
// requested before pdl_wait. Warps sum their shares in shared memory and
// warp 0's lanes 0..3 write the tile.
//
// launch_skinny_gemm takes this kernel for rows <= quant_gemv_max_rows():
// FLASHSCOPE_QUANT_GEMV=N in the environment (0: never, the default; 1 or
// 2), or set_quant_gemv_max_rows (tests and bench/quant_gemm_sweep.cu run
// both kernels in one process). Opt-in: end to end it decodes slower than
// the tensor-core tiles so far (bench/TUNING.md, "The few-row GEMV").

namespace {

constexpr int kGemvTileUnits = 4;  // units per tile: 8 weight rows, the mma's N
constexpr int kGemvAhead = 2;      // items in flight beyond the one being decoded
constexpr int kGemvTokens = 2;     // rows of A that carry tokens (0 and 8): steps of 1 or 2 rows

// Weight row n (0..7) of a tile: unit tile·4 + n/2, its first row (n even) or second.
struct GemvRow {
  const uint8_t* w;
  bool has;
};
__device__ __forceinline__ GemvRow gemv_row(const SkinnyGemmKernelParams& p, bool swiglu, int tile, int n) {
  const SkinnyQuantWeights& wq = p.wq;
  const int unit = tile * kGemvTileUnits + n / 2;
  if (swiglu) return {(n % 2 ? wq.up_data : wq.data) + int64_t(unit) * wq.row_bytes, unit < p.n_out};
  const int row = wq.row_begin + 2 * unit + n % 2;
  return {wq.data + int64_t(row - wq.row_begin) * wq.row_bytes, row < wq.row_end};
}

// The epilogue's view of unit u (UnitRows, as skinny_gemm_quant_kernel's units).
__device__ __forceinline__ UnitRows gemv_unit_rows(const SkinnyGemmKernelParams& p, bool swiglu, int unit) {
  UnitRows r;
  r.unit = unit;
  if (swiglu) {
    r.row0 = r.row1 = unit;
    r.has0 = r.has1 = unit < p.n_out;
  } else {
    r.row0 = p.wq.row_begin + 2 * unit;
    r.row1 = r.row0 + 1;
    r.has0 = r.row0 < p.wq.row_end;
    r.has1 = r.row1 < p.wq.row_end;
  }
  return r;
}

// acc (the m16n8 fragment) += part `part` of step `step` of this lane's
// weight row (bytes b; zeros where !has_w) · the tokens' inputs. x_pairs:
// the staged rows interleaved a 32-bit word at a time (token 0's word w,
// token 1's word w, ...), so one 16-byte load is the whole A fragment of a
// quad: rows 0 (a0, a2) and 8 (a1, a3) of A are tokens 0 and 1, and every
// other row repeats them (their products land in rows of D nobody reads).
// Every lane runs every mma (mma.sync).
template <int kType>
__device__ __forceinline__ void gemv_mma_part(const quant::PartBytes& b, bool has_w, int step, int part, int groups,
                                              const uint4* x_pairs, float (&acc)[4]) {
#pragma unroll
  for (int sub = 0; sub < quant::part_groups(kType); ++sub) {
    const int g = quant::part_group(kType, step, part, sub);
    const bool live = g < groups;
    // A group past k or a row past the end: zero scales make zero weights
    // whatever its bytes (its codes are small integers, never NaN), and its
    // inputs are group 0's (staged, finite).
    quant::GroupScales s = quant::part_scales<kType>(b, part, sub);
    if (!(live && has_w)) s = {0.0f, 0.0f, 0.0f};
    const uint4* xg = x_pairs + int64_t(live ? g : 0) * (quant::kGroup / 4);
#pragma unroll
    for (int quad = 0; quad < 8; ++quad) {
      const uint32_t codes = quant::quad_codes<kType>(b, part, sub, quad);
      float w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = quant::group_value(s, 4 * quad + i, quant::quad_q<kType>(codes, i));
      const uint32_t b_frag[2] = {pack_bf16x2(w[0], w[1]), pack_bf16x2(w[2], w[3])};
      const uint4 x = xg[quad];
      const uint32_t a_frag[4] = {x.x, x.y, x.z, x.w};
      MmaType<__nv_bfloat16>::mma(a_frag, b_frag, acc);
    }
  }
}

// Dynamic shared memory of quant_gemv_kernel at k: the interleaved rows, then the staged ones.
constexpr size_t gemv_smem_bytes(int k) { return size_t(2) * kGemvTokens * k * sizeof(uint16_t); }

template <int kType>
__global__ void __launch_bounds__(kThreads) quant_gemv_kernel(const __grid_constant__ SkinnyGemmKernelParams p) {
  // [k / 2][2] words: token t's bf16 pair w at 2·w + t; then [2][k / 8] chunks as stage_input writes them
  extern __shared__ uint4 x_smem[];
  __shared__ float4 share_smem[kWarps][4];  // each warp's sums: lane c = unit c, tokens 0 and 1
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gid = lane / 4, part = lane % 4;
  const int kc = p.k / kChunkElems;
  const int groups = p.k / quant::kGroup;
  constexpr int kStepGroups = quant::step_groups(kType);
  const int steps = ceil_div(groups, kStepGroups);
  const bool swiglu = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int units = swiglu ? p.n_out : (p.wq.row_end - p.wq.row_begin + 1) / 2;
  const int tiles = ceil_div(units, kGemvTileUnits);

  // This warp's items in order: tiles blockIdx.x, + gridDim.x, ..., in each
  // steps warp, + kWarps, ...; with the lane's row of the item's tile (found
  // once a tile) and whether it is read (a tile or row past the end is not).
  struct Item {
    int tile, step;
    const uint8_t* row;
    bool has;
  };
  auto at_tile = [&](Item& it) {
    const GemvRow r = gemv_row(p, swiglu, it.tile, gid);
    it.row = r.w;
    it.has = r.has && it.tile < tiles && it.step < steps;
  };
  auto next = [&](Item it) {
    it.step += kWarps;
    if (it.step >= steps) {
      it.tile += gridDim.x;
      it.step = warp;
      at_tile(it);
    }
    return it;
  };
  auto load = [&](const Item& it, quant::PartBytes& b) {
    if (it.has && quant::part_group(kType, it.step, part, 0) < groups)
      quant::load_part<kType>(it.row, it.step, part, b);
  };
  static_assert(kGemvAhead == 2, "the ring below holds the decoded item and two ahead");
  quant::PartBytes b0 = {}, b1 = {}, b2 = {};
  Item ahead = {int(blockIdx.x), warp, nullptr, false};
  at_tile(ahead);
  // The weights do not depend on the kernel before this one: the first
  // items' are requested, then that kernel's outputs waited for.
  load(ahead, b0);
  ahead = next(ahead);
  load(ahead, b1);
  ahead = next(ahead);
  pdl_wait();
  pdl_launch_dependents();
  // One row staged as the tiles' kernel stages it (RMSNorm: the same sums in
  // the same order, so both kernels multiply the same inputs), the other zero.
  uint4* staged = x_smem + p.k / 4;
  if (p.rows == 1) {
    stage_input<1>(p, staged, kc);
    for (int c = threadIdx.x; c < kc; c += kThreads) staged[kc + c] = make_uint4(0u, 0u, 0u, 0u);
  } else {
    stage_input<kGemvTokens>(p, staged, kc);
  }
  __syncthreads();  // the rows are staged before they are interleaved
  {
    const uint32_t* rows32 = reinterpret_cast<const uint32_t*>(staged);
    uint2* pairs = reinterpret_cast<uint2*>(x_smem);
    for (int w = threadIdx.x; w < p.k / 2; w += kThreads) pairs[w] = make_uint2(rows32[w], rows32[p.k / 2 + w]);
  }
  __syncthreads();  // every pair is in place before any warp reads one

  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // Warp 0's lane c writes unit c: what its epilogue reads goes out now.
    const UnitRows rows = gemv_unit_rows(p, swiglu, tile * kGemvTileUnits + part);
    const bool writes = warp == 0 && gid == 0 && rows.has0;
    EpilogueInputs epi[kGemvTokens];
    if (writes && !swiglu) {
#pragma unroll
      for (int t = 0; t < kGemvTokens; ++t)
        if (t < p.rows) epi[t] = load_epilogue_inputs(p, t, rows.row0, rows.has1);
    }
    const bool has_w = gemv_row(p, swiglu, tile, gid).has;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int step = warp; step < steps; step += kWarps) {
      load(ahead, b2);
      ahead = next(ahead);
      gemv_mma_part<kType>(b0, has_w, step, part, groups, x_smem, acc);
      b0 = b1;
      b1 = b2;
    }
    if (gid == 0) share_smem[warp][part] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    __syncthreads();  // every warp's share is in shared memory
    if (writes) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float4 f = share_smem[w][part];
        c[0] += f.x;
        c[1] += f.y;
        c[2] += f.z;
        c[3] += f.w;
      }
      // c[0], c[1]: token 0 at the unit's rows 0 and 1 (D's row 0); c[2], c[3]: token 1 (D's row 8)
      store_unit(p, 0, rows, c[0], c[1], epi[0]);
      if (p.rows > 1) store_unit(p, 1, rows, c[2], c[3], epi[1]);
    }
    __syncthreads();  // share_smem is read before the next tile's shares overwrite it
  }
}

template <int kType>
cudaError_t launch_gemv(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  const bool gated_units = p.output == SkinnyOutput::kSwiglu || p.output == SkinnyOutput::kGegluTanh;
  const int rows = gated_units ? p.n_out : p.wq.row_end - p.wq.row_begin;
  const int units = gated_units ? rows : (rows + 1) / 2;
  const int tiles = ceil_div(units, kGemvTileUnits);
  const size_t smem = gemv_smem_bytes(p.k);
  auto kernel = quant_gemv_kernel<kType>;
  if (smem + kQuantStaticSmem > 48 * 1024) {
    const cudaError_t e = opt_in_dynamic_smem<quant_gemv_kernel<kType>>(int(skinny_gemm_quant_smem_limit()));
    if (e != cudaSuccess) return e;
  }
  const int ctas = resident_ctas(kernel, smem, p.sm_count);
  return launch_maybe_programmatic(kernel, dim3(std::min(tiles, ctas)), dim3(kThreads), smem, stream, programmatic,
                                   p);
}

cudaError_t launch_quant_gemv(const SkinnyGemmKernelParams& p, cudaStream_t stream, bool programmatic) {
  switch (p.wq.type) {
    case quant::kQ4_0: return launch_gemv<quant::kQ4_0>(p, stream, programmatic);
    case quant::kQ4_1: return launch_gemv<quant::kQ4_1>(p, stream, programmatic);
    case quant::kQ5_0: return launch_gemv<quant::kQ5_0>(p, stream, programmatic);
    case quant::kQ5_1: return launch_gemv<quant::kQ5_1>(p, stream, programmatic);
    case quant::kQ8_0: return launch_gemv<quant::kQ8_0>(p, stream, programmatic);
    case quant::kQ4_K: return launch_gemv<quant::kQ4_K>(p, stream, programmatic);
    case quant::kQ5_K: return launch_gemv<quant::kQ5_K>(p, stream, programmatic);
    case quant::kQ6_K: return launch_gemv<quant::kQ6_K>(p, stream, programmatic);
    default: return cudaErrorInvalidValue;
  }
}

// Whether a step of `rows` rows of k takes the GEMV: the rows the switch
// allows, and its shared memory within what the device lets a CTA have.
bool quant_gemv_takes(int rows, int k) {
  return rows <= quant_gemv_max_rows() && gemv_smem_bytes(k) <= skinny_gemm_quant_smem_limit();
}

// FLASHSCOPE_QUANT_GEMV's rows, or what set_quant_gemv_max_rows set.
EnvSwitch g_quant_gemv_rows;
constexpr int kQuantGemvDefaultRows = 0;

}  // namespace

int quant_gemv_max_rows() {
  return g_quant_gemv_rows.get([] {
    int rows = kQuantGemvDefaultRows;
    if (const char* env = std::getenv("FLASHSCOPE_QUANT_GEMV"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0') rows = int(std::clamp<long>(v, 0, kGemvTokens));
    }
    return rows;
  });
}

void set_quant_gemv_max_rows(int rows) { g_quant_gemv_rows.set(std::clamp(rows, 0, kGemvTokens)); }

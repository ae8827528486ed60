// What each backend does for capture_attention (attention_capture.hpp): run
// the probed build of its attention on one layer's kept query rows and the
// cache's K and V, and hand back the operands and the kernel's lse so the
// engine can label the traces and summarise every head.
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/status.hpp"
#include "flashscope/trace_records.hpp"
#include "model/model_impl.hpp"

namespace flashscope::model {

// One layer's capture, checked by the caller (engine/attention_capture.cpp):
// the kept rows cover positions [first, first + rows), first + rows = keys
// = the sequence's cached tokens, heads and follow_rows in range.
struct LayerCaptureJob {
  int layer = 0;
  int first = 0, rows = 0, keys = 0;
  int window = 0;       // the layer's sliding window (0: none): keys (p − W, p]
  float scale = 0;      // softmax scale
  std::vector<int> heads;             // q-heads to trace
  std::vector<int32_t> follow_rows;   // row indices (0 = position first) whose softmax state is recorded
  bool sample_all = false;            // record every block's probabilities (else the diagonal and first blocks)
  std::vector<int> decode_rows;       // rows fed alone (decode steps), for backends that trace them apart
};

struct LayerCaptureOut {
  std::vector<Trace> traces;  // one per job.heads entry, in that order (tokens not yet set)
  std::vector<uint16_t> q;    // [rows, n_heads · head_dim] bf16: the rows the kernel read
  std::vector<uint16_t> k;    // [keys, n_kv_heads · head_dim] bf16
  std::vector<float> lse;     // [n_heads, rows] the kernel's lse, natural log
  std::vector<std::vector<Trace>> steps;  // per job.heads entry: one trace per job.decode_rows entry, or none
};

// The CPU backend: capture_cpu_prefill_trace over the kept rows and the
// sequence's cache, gathered out of its pages (backends/cpu/capture_cpu.cpp).
Status cpu_capture_layer(const Model::Impl& m, Sequence::State& st, const LayerCaptureJob& job, LayerCaptureOut* out);
// The CUDA backend: the probed paged kernels over the page pool
// (backends/cuda/capture_cuda.cpp); kUnsupported without the probed kernels.
Status cuda_capture_layer(const Model::Impl& m, Sequence::State& st, const LayerCaptureJob& job, LayerCaptureOut* out);

// The CPU sequence's cache of one layer: the pools of its PagedKvCache,
// [pages, n_kv_heads, page_size, head_dim] bf16, token t in page
// block_table[t / page_size] at row t % page_size.
struct CpuLayerCache {
  const uint16_t* k_pages = nullptr;
  const uint16_t* v_pages = nullptr;
  const int32_t* block_table = nullptr;  // covers [0, capacity)
  int page_size = 0;
  int capacity = 0;
  // A q8_0 or q4_0 cache instead (kv_type; k_pages, v_pages null): pools in
  // the layout of attention/cpu/kv_q8.hpp or kv_q4.hpp, [pages, n_kv_heads,
  // kv_q8_head_bytes or kv_q4_head_bytes].
  KvType kv_type = KvType::kBF16;
  const uint8_t* k_quant = nullptr;
  const uint8_t* v_quant = nullptr;
};
CpuLayerCache cpu_layer_cache(const Sequence::State& st, int layer);

}  // namespace flashscope::model

// StepTap: an armed attention capture (model/query_tap.hpp) on one CUDA
// step. The step stages the armed layers' rotated q rows on the device
// (StepScratch::tap_block, enqueue_step's keep_q: copies a decode graph
// holds as nodes); after it one strided copy brings the step's rows of every
// staged layer into pinned host memory, and from there they go to each
// sequence's tap. Only while armed: the guard leaves the scratch unarmed
// whatever happens, and a step with no armed sequence never makes one.
#pragma once

#if FLASHSCOPE_WITH_CUDA
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_model.hpp"
#include "model/query_tap.hpp"

namespace flashscope::model {

class StepTap {
 public:
  explicit StepTap(StepScratch& sc) : sc_(sc) {}
  ~StepTap() { sc_.tap_block.clear(); }
  StepTap(const StepTap&) = delete;
  StepTap& operator=(const StepTap&) = delete;

  // Stages every layer `tap` arms (call again for each armed sequence of a
  // batch: the union is staged). After ensure_rows: blocks of sc.rows rows.
  Status arm(const ModelConfig& c, const QueryTap& tap) {
    try {
      if (sc_.tap_block.empty()) sc_.tap_block.assign(static_cast<size_t>(c.n_layers), -1);
    } catch (const std::bad_alloc&) {
      return {StatusCode::kOutOfMemory, "attention capture: cannot allocate"};
    }
    blocks_ = 0;
    for (int l = 0; l < c.n_layers; ++l) {
      int& b = sc_.tap_block[static_cast<size_t>(l)];
      if (b < 0 && tap.armed_layer(l)) b = 0;  // numbered below
      if (b >= 0) b = blocks_++;
    }
    row_elems_ = static_cast<size_t>(tap.row_elems);
    const size_t bytes = static_cast<size_t>(blocks_) * static_cast<size_t>(sc_.rows) * row_elems_ * sizeof(uint16_t);
    if (bytes <= sc_.tap_stage.size()) return {};
    auto b = device_alloc(bytes, "the captured query rows");
    if (!b.ok()) return b.status();
    sc_.tap_stage = std::move(b).value();
    return {};
  }

  // After the step was enqueued: its rows [0, n) of every staged layer to
  // the host, packed (block b's at b·n), and the stream synchronized.
  Status fetch(int n) {
    const size_t row_bytes = row_elems_ * sizeof(uint16_t);
    const size_t bytes = static_cast<size_t>(blocks_) * static_cast<size_t>(n) * row_bytes;
    if (bytes > sc_.tap_host.size())
      FLASHSCOPE_RETURN_IF_ERROR(sc_.tap_host.allocate(bytes, "the captured query rows"));
    fetched_ = n;
    if (bytes > 0)
      FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
          cudaMemcpy2DAsync(sc_.tap_host.data(), static_cast<size_t>(n) * row_bytes, sc_.tap_stage.data(),
                            static_cast<size_t>(sc_.rows) * row_bytes, static_cast<size_t>(n) * row_bytes,
                            static_cast<size_t>(blocks_), cudaMemcpyDeviceToHost, sc_.stream),
          "cudaMemcpy2DAsync of the captured query rows"));
    return cuda_check(cudaStreamSynchronize(sc_.stream), "forward on the device");
  }

  // Keeps the fetched rows [row0, row0 + n) as slots [slot, slot + n) of `tap` (after fetch()).
  Status keep(const ModelConfig& c, QueryTap& tap, int slot, int row0, int n) {
    for (int l = 0; l < c.n_layers; ++l) {
      const int block = sc_.tap_block[static_cast<size_t>(l)];
      if (block < 0 || !tap.armed_layer(l)) continue;
      const auto* src = reinterpret_cast<const uint16_t*>(sc_.tap_host.data()) +
                        (static_cast<size_t>(block) * static_cast<size_t>(fetched_) + static_cast<size_t>(row0)) *
                            row_elems_;
      FLASHSCOPE_RETURN_IF_ERROR(tap.keep(l, slot, src, n));
    }
    return {};
  }

 private:
  StepScratch& sc_;
  size_t row_elems_ = 0;
  int blocks_ = 0;   // staged layers
  int fetched_ = 0;  // rows per layer in tap_host
};

}  // namespace flashscope::model
#endif

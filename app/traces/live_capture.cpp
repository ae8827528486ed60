#include "traces/live_capture.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "flashscope/attention.hpp"

namespace flashscope::app {

namespace {

constexpr int kMinTokens = 256;   // 4 × 4 tiles of 64: the smallest grid worth a picture
constexpr int kMaxTokens = 1024;  // 16 × 16 tiles; under a second for the CPU capture of SmolLM2's shape

}  // namespace

LiveCaptureJob chat_capture_job(const ModelConfig& c, const std::string& model_name, int conversation_tokens, int head,
                                const std::string& provenance) {
  LiveCaptureJob job;
  SyntheticShape& s = job.request.shape;
  s.q_heads = std::max(c.n_heads, 1);
  s.kv_heads = std::max(c.n_kv_heads, 1);
  // The model's own head_dim (Gemma 3: 256) where an attention path runs it;
  // otherwise the nearest the kernels have, and the note says so.
  const bool own_dim = supported_head_dim(c.head_dim);
  s.head_dim = own_dim ? c.head_dim : (c.head_dim > 96 ? 128 : 64);
  s.q_len = s.kv_len = std::clamp(conversation_tokens, kMinTokens, kMaxTokens);
  s.causal = true;
  job.request.head = std::clamp(head, 0, s.q_heads - 1);
  job.request.seed = 1;
  job.request.cpu_max_flops = 0;  // the clamp above already bounds it
  job.provenance = provenance;
  char buf[400];
  if (conversation_tokens <= 0) {
    std::snprintf(buf, sizeof buf,
                  "synthetic inputs of %s's attention shape (%d q-heads / %d kv-heads, D %d): "
                  "a causal prefill of %d tokens, not the model's activations",
                  model_name.c_str(), s.q_heads, s.kv_heads, s.head_dim, s.q_len);
  } else {
    std::snprintf(buf, sizeof buf,
                  "synthetic inputs of %s's attention shape (%d q-heads / %d kv-heads, D %d): "
                  "a causal prefill of %d tokens (the conversation holds %d; shown within %d..%d), not the "
                  "model's activations",
                  model_name.c_str(), s.q_heads, s.kv_heads, s.head_dim, s.q_len, conversation_tokens, kMinTokens,
                  kMaxTokens);
  }
  job.note = buf;
  if (!own_dim) {
    std::snprintf(buf, sizeof buf, "; the model's head_dim %d has no attention path, so D %d is shown", c.head_dim,
                  s.head_dim);
    job.note += buf;
  }
  return job;
}

LiveCapture::~LiveCapture() {
  if (running_.valid()) running_.wait();
}

void LiveCapture::launch(LiveCaptureJob job) {
  running_ = std::async(std::launch::async, [job = std::move(job)] {
    LiveCaptureResult r;
    r.outcome = capture_prefill(job.request);
    r.provenance = job.provenance;
    r.note = job.note;
    return r;
  });
}

void LiveCapture::request(LiveCaptureJob job) {
  if (running_.valid()) {
    pending_ = std::move(job);
    return;
  }
  launch(std::move(job));
}

bool LiveCapture::poll(LiveCaptureResult* out) {
  if (!running_.valid() || running_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  *out = running_.get();
  if (pending_) {
    launch(std::move(*pending_));
    pending_.reset();
  }
  return true;
}

}  // namespace flashscope::app

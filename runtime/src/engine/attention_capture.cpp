// capture_attention and arming (attention_capture.hpp): the checks, the
// backend's layer capture (backends/capture_backend.hpp), then what both
// backends share: the tokens on the traces' axes and every head's summary.
#include <algorithm>
#include <cmath>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/capture_backend.hpp"
#include "engine/head_summary.hpp"
#include "flashscope/attention_capture.hpp"
#include "flashscope/half.hpp"
#include "model/internal.hpp"

namespace flashscope {
namespace {

using model::Internal;
using model::QueryTap;

// The head's columns of rows [n, stride] at offset col, dim wide, as floats.
std::vector<float> columns(const std::vector<uint16_t>& x, size_t n, size_t stride, size_t col, size_t dim) {
  std::vector<float> f(n * dim);
  for (size_t r = 0; r < n; ++r)
    for (size_t d = 0; d < dim; ++d) f[r * dim + d] = bf16_to_float(x[r * stride + col + d]);
  return f;
}

TraceTokens tokens_of(const Tokenizer& tok, const std::vector<int32_t>& ids, int first, int keys, int layer) {
  TraceTokens t;
  t.layer = layer;
  t.keys.resize(static_cast<size_t>(keys));
  for (int j = 0; j < keys; ++j) {
    const int32_t id = ids[static_cast<size_t>(j)];
    const std::string& text = tok.token_text(id);
    t.keys[static_cast<size_t>(j)] = {id, text.substr(0, TraceToken::kMaxTextBytes)};
  }
  for (int p = first; p < keys; ++p) t.row_keys.push_back(static_cast<uint32_t>(p));
  return t;
}

Status check_request(const ModelConfig& c, const AttentionCaptureRequest& req, const CapturedRows& rows) {
  if (req.layer < 0 || req.layer >= c.n_layers)
    return invalid_argument("capture_attention: layer " + std::to_string(req.layer) + " is out of range (the model has " +
                            std::to_string(c.n_layers) + " layers)");
  for (int h : req.heads) {
    if (h < 0 || h >= c.n_heads)
      return invalid_argument("capture_attention: head " + std::to_string(h) + " is out of range (the model has " +
                              std::to_string(c.n_heads) + " query heads)");
  }
  if (rows.rows == 0)
    return invalid_argument("capture_attention: layer " + std::to_string(req.layer) +
                            " has no captured query rows (arm_attention_capture before the forward passes to capture)");
  for (int32_t r : req.rows) {
    if (r < 0 || r >= rows.rows)
      return invalid_argument("capture_attention: row " + std::to_string(r) + " is outside the " +
                              std::to_string(rows.rows) + " captured rows");
  }
  if (req.max_sampled_pairs < 0) return invalid_argument("capture_attention: max_sampled_pairs is negative");
  return {};
}

}  // namespace

Status arm_attention_capture(Sequence& seq, int layer) {
  Sequence::State* st = Internal::state(seq);
  if (st == nullptr || st->owner == nullptr) return invalid_argument("arm_attention_capture: the sequence is empty");
  const ModelConfig& c = st->owner->config;
  if (layer < -1 || layer >= c.n_layers)
    return invalid_argument("arm_attention_capture: layer " + std::to_string(layer) + " is out of range (the model has " +
                            std::to_string(c.n_layers) + " layers; -1 arms all)");
  try {
    if (!st->q_tap) {
      auto tap = std::make_unique<QueryTap>();
      tap->row_elems = c.n_heads * c.head_dim;
      tap->first = static_cast<int>(st->tokens.size());
      tap->armed.assign(static_cast<size_t>(c.n_layers), 0);
      tap->rows.resize(static_cast<size_t>(c.n_layers));
      st->q_tap = std::move(tap);
    }
  } catch (const std::bad_alloc&) {
    return {StatusCode::kOutOfMemory, "arm_attention_capture: cannot allocate"};
  }
  QueryTap& tap = *st->q_tap;
  bool added = false;
  for (int l = 0; l < c.n_layers; ++l) {
    if ((layer == -1 || l == layer) && !tap.armed_layer(l)) {
      tap.armed[static_cast<size_t>(l)] = 1;
      added = true;
    }
  }
  // Every armed layer's rows start at the same position: a new layer restarts them all here.
  if (added) {
    tap.first = static_cast<int>(st->tokens.size());
    for (auto& r : tap.rows) r.clear();
    tap.alone.clear();
  }
  return {};
}

Status arm_attention_capture(Session& session, int layer) {
  return arm_attention_capture(Internal::sequence(session), layer);
}

void disarm_attention_capture(Sequence& seq) {
  if (Sequence::State* st = Internal::state(seq)) st->q_tap.reset();
}

void disarm_attention_capture(Session& session) { disarm_attention_capture(Internal::sequence(session)); }

CapturedRows captured_rows(const Sequence& seq, int layer) {
  const Sequence::State* st = Internal::state(seq);
  if (st == nullptr || !st->q_tap || layer < 0 || layer >= static_cast<int>(st->q_tap->rows.size())) return {};
  const QueryTap& tap = *st->q_tap;
  const int end = static_cast<int>(st->tokens.size());
  if (tap.first >= end) return {tap.first, 0};
  return {tap.first, std::min(tap.kept(layer), end - tap.first)};
}

Result<AttentionCapture> capture_attention(const Model& model, Sequence& seq, const AttentionCaptureRequest& req) {
  const Model::Impl* m = Internal::impl(model);
  Sequence::State* st = Internal::state(seq);
  if (m == nullptr) return invalid_argument("capture_attention: the model is not loaded");
  if (st == nullptr || st->owner != m) return invalid_argument("capture_attention: the sequence is not this model's");
  const ModelConfig& c = m->config;
  const CapturedRows rows = captured_rows(seq, req.layer);
  FLASHSCOPE_RETURN_IF_ERROR(check_request(c, req, rows));
  // Rows must end at the cache's end (a row's keys are the cache up to it).
  const int keys = static_cast<int>(st->tokens.size());
  if (rows.first + rows.rows != keys)
    return invalid_argument("capture_attention: layer " + std::to_string(req.layer) + " kept rows for positions [" +
                            std::to_string(rows.first) + ", " + std::to_string(rows.first + rows.rows) +
                            ") only, not up to the sequence's " + std::to_string(keys) + " tokens");

  model::LayerCaptureJob job;
  job.layer = req.layer;
  job.first = rows.first;
  job.rows = rows.rows;
  job.keys = keys;
  job.window = c.layer(req.layer).window;
  // The scale the engine's attention uses (0 there means 1/√head_dim).
  job.scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  model::LayerCaptureOut out;
  try {
    job.heads = req.heads;
    if (job.heads.empty())
      for (int h = 0; h < c.n_heads; ++h) job.heads.push_back(h);
    job.follow_rows = req.rows;
    if (job.follow_rows.empty())
      for (int r = 0; r < rows.rows; ++r) job.follow_rows.push_back(r);
  } catch (const std::bad_alloc&) {
    return Status{StatusCode::kOutOfMemory, "capture_attention: cannot allocate"};
  }
  job.sample_all = int64_t{rows.rows} * keys <= req.max_sampled_pairs;
  try {
    const QueryTap& tap = *st->q_tap;
    for (int r = 0; r < rows.rows; ++r) {
      const size_t at = static_cast<size_t>(rows.first + r - tap.first);
      if (at < tap.alone.size() && tap.alone[at]) job.decode_rows.push_back(r);
    }
  } catch (const std::bad_alloc&) {
    return Status{StatusCode::kOutOfMemory, "capture_attention: cannot allocate"};
  }
  if (model.device() == Device::kCuda) {
    FLASHSCOPE_RETURN_IF_ERROR(model::cuda_capture_layer(*m, *st, job, &out));
  } else {
    FLASHSCOPE_RETURN_IF_ERROR(model::cpu_capture_layer(*m, *st, job, &out));
  }

  AttentionCapture cap;
  cap.layer = req.layer;
  cap.first = rows.first;
  cap.rows = rows.rows;
  cap.keys = keys;
  cap.window = job.window;
  cap.softmax_scale = job.scale;
  const size_t dim = static_cast<size_t>(c.head_dim);
  const size_t q_stride = static_cast<size_t>(c.n_heads) * dim, k_stride = static_cast<size_t>(c.n_kv_heads) * dim;
  const int group = c.n_heads / c.n_kv_heads;
  try {
    const TraceTokens tokens = tokens_of(m->tokenizer, st->tokens, rows.first, keys, req.layer);
    std::vector<std::vector<float>> k_heads(static_cast<size_t>(c.n_kv_heads));
    for (int g = 0; g < c.n_kv_heads; ++g)
      k_heads[static_cast<size_t>(g)] = columns(out.k, static_cast<size_t>(keys), k_stride, static_cast<size_t>(g) * dim, dim);
    for (int h = 0; h < c.n_heads; ++h) {
      const std::vector<float> q = columns(out.q, static_cast<size_t>(rows.rows), q_stride, static_cast<size_t>(h) * dim, dim);
      model::HeadOperands ops;
      ops.q = q.data();
      ops.k = k_heads[static_cast<size_t>(h / group)].data();
      ops.lse = out.lse.data() + static_cast<size_t>(h) * rows.rows;
      ops.rows = rows.rows;
      ops.keys = keys;
      ops.dim = c.head_dim;
      ops.first = rows.first;
      ops.window = job.window;
      ops.model_window = c.sliding_window;
      ops.scale = job.scale;
      HeadSummary s = model::summarize_head(ops);
      s.head = h;
      cap.all_heads.push_back(s);
    }
    for (size_t i = 0; i < job.heads.size(); ++i) {
      const int h = job.heads[i];
      HeadCapture hc;
      hc.head = h;
      hc.trace = std::move(out.traces[i]);
      hc.trace.tokens = tokens;
      hc.summary = cap.all_heads[static_cast<size_t>(h)];
      hc.q = columns(out.q, static_cast<size_t>(rows.rows), q_stride, static_cast<size_t>(h) * dim, dim);
      hc.k = k_heads[static_cast<size_t>(h / group)];
      hc.lse.assign(out.lse.begin() + static_cast<std::ptrdiff_t>(h) * rows.rows,
                    out.lse.begin() + static_cast<std::ptrdiff_t>(h + 1) * rows.rows);
      if (i < out.steps.size() && !out.steps[i].empty()) {
        hc.decode_steps = std::move(out.steps[i]);
        hc.decode_rows = job.decode_rows;
        for (size_t n = 0; n < hc.decode_steps.size(); ++n) {
          // A step's keys are the conversation up to its row; its one row is that row's token.
          TraceTokens& tt = hc.decode_steps[n].tokens;
          const int pos = rows.first + job.decode_rows[n];
          tt.layer = req.layer;
          tt.keys.assign(tokens.keys.begin(), tokens.keys.begin() + pos + 1);
          tt.row_keys = {static_cast<uint32_t>(pos)};
        }
      }
      cap.heads.push_back(std::move(hc));
    }
  } catch (const std::bad_alloc&) {
    return Status{StatusCode::kOutOfMemory, "capture_attention: cannot allocate the capture's results"};
  }
  return cap;
}

Result<AttentionCapture> capture_attention(Session& session, const AttentionCaptureRequest& req) {
  return capture_attention(Internal::model(session), Internal::sequence(session), req);
}

}  // namespace flashscope

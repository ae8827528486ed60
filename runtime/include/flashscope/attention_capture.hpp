// The model's own attention: traces of a conversation's real Q, K and V.
//
//   auto session = Session::create(model);
//   arm_attention_capture(*session, -1);            // keep every layer's query rows from now on
//   session->generate(prompt, params, on_token);    // the turn runs as always
//   AttentionCaptureRequest req;
//   req.layer = 3;
//   req.heads = {5};
//   auto cap = capture_attention(*session, req);    // a Trace per head, labelled with the tokens
//   write_trace(cap->heads[0].trace, "t.fstrace");
//
// Arming keeps the bf16 query rows each forward pass feeds the armed layers'
// attention (rotated, QK-normed: the operand the attention read), from the
// sequence's current end on. capture_attention then runs the probed build of
// the attention the engine uses on those rows and on the layer's K and V
// from the cache the sequence already holds, with the layer's causal mask,
// window and scale:
//   CPU    the capture of the CPU backend's tiled attention
//          (capture_cpu_prefill_trace): one causal pass over the kept rows
//          computes, row by row, what the prompt's prefill and each decode
//          step computed (a row's numbers depend on its keys and the fixed
//          64-key tiles only, not on which rows ran beside it).
//   CUDA   the probed paged kernels over the engine's page pool
//          (capture_cuda_paged_trace): the prompt's rows as the chunked
//          prefill, each generated token's row as its decode step (split-KV).
// Disarmed, the forward does no extra work: no copy, no kernel change.
// Armed on CUDA, a step copies the armed layers' rows to fixed device rows
// (part of the decode step's CUDA graph: a graph is captured for the armed
// layers, and another arming captures anew) and waits for one copy of them
// to the host; steps that feed no armed sequence run as before. Rows fed by Model::forward_batch
// (BatchGenerator, the server) are kept like the others.
#pragma once

#include <cstdint>
#include <vector>

#include "flashscope/model.hpp"
#include "flashscope/session.hpp"
#include "flashscope/status.hpp"
#include "flashscope/trace_records.hpp"

namespace flashscope {

// Keeps layer `layer`'s query rows (-1: every layer's) from the sequence's
// next forward on. Arming a layer already armed changes nothing; arming
// another restarts every armed layer's rows at the sequence's end (they
// all cover the same positions). kInvalidArgument for a layer out of range
// or an empty sequence object.
Status arm_attention_capture(Sequence& seq, int layer);
Status arm_attention_capture(Session& session, int layer);
// Drops the kept rows; the forward is as before arming.
void disarm_attention_capture(Sequence& seq);
void disarm_attention_capture(Session& session);

// The query rows a capture can use: positions [first, end) of the sequence,
// end = n_tokens(). rows = 0 when the layer is not armed or nothing was fed since.
struct CapturedRows {
  int first = 0;
  int rows = 0;
};
CapturedRows captured_rows(const Sequence& seq, int layer);

// One head's attention over the captured rows, in numbers.
//   p_ij = exp(s_ij − lse_i), s_ij = scale · q_i·k_j over the keys row i sees,
// with q, k the bf16 operands the kernel read and lse_i the kernel's. Means
// over the rows that see at least one key.
struct HeadSummary {
  int head = 0;
  int rows = 0;                    // rows summarised
  double entropy = 0;              // mean −Σ_j p_ij ln p_ij, nats (ln of the keys seen for a uniform row)
  double first_token_mass = 0;     // mean p_i0: the attention sink
  double previous_token_mass = 0;  // mean p_i,i−1 over rows with a previous key
  double self_mass = 0;            // mean p_ii (the row's own key)
  // The model's sliding window W (ModelConfig::sliding_window): mean mass on
  // the W keys ending at the row's own, so 1 on a sliding layer and a measure
  // of locality on a global one. -1 when the model has no window.
  double window_mass = -1;
};

struct AttentionCaptureRequest {
  int layer = 0;
  std::vector<int> heads = {0};  // q-heads to trace; empty: every head of the layer
  // Rows whose softmax state is recorded after every KV tile; empty: every
  // captured row (rows are indices into the captured rows, 0 = position first).
  std::vector<int32_t> rows;
  // Every (q-tile, kv-tile) block's probabilities are recorded when the
  // captured rows × keys are at most this (the views can then show every
  // token); else the diagonal blocks and the first key block.
  int64_t max_sampled_pairs = int64_t{1} << 20;
};

// One traced head.
struct HeadCapture {
  int head = 0;
  Trace trace;  // meta.traced_head = head; tokens: the sequence's tokens, tokens.layer = the layer
  HeadSummary summary;
  // The numbers the trace came from, float copies of the bf16 operands:
  std::vector<float> q;    // [rows, head_dim] the head's captured query rows
  std::vector<float> k;    // [keys, head_dim] its kv-head's keys
  std::vector<float> lse;  // [rows] the kernel's lse of each row (natural log; -inf: no key seen)
  // CUDA: the answer's decode steps, each row that was fed alone traced again
  // by itself through the decode kernel as its step ran it (q_len 1 over its
  // keys, split-KV as planned for it), in row order; decode_rows[i] is the
  // row of decode_steps[i]. CPU: empty (trace's rows are those steps' numbers).
  std::vector<Trace> decode_steps;
  std::vector<int> decode_rows;
};

struct AttentionCapture {
  int layer = 0;
  int first = 0;          // position of captured row 0 (rows are positions [first, keys))
  int rows = 0, keys = 0;
  int window = 0;         // the layer's sliding window; 0: whole causal context
  float softmax_scale = 0;
  std::vector<HeadCapture> heads;       // the requested heads, in the order asked
  std::vector<HeadSummary> all_heads;   // every q-head of the layer, head order
};

// Runs the capture (see the top of the file) on what `seq` holds. Errors:
// kInvalidArgument for a layer or head out of range, rows outside the
// captured ones, or a layer with no captured rows (not armed, or nothing fed
// since: the message says which); kUnsupported for a CUDA model in a build
// without the probed kernels; device and allocation errors pass through.
Result<AttentionCapture> capture_attention(const Model& model, Sequence& seq, const AttentionCaptureRequest& req);
// The session's sequence (its pending token, sampled but not yet fed, has
// no K or V yet and is not part of the capture).
Result<AttentionCapture> capture_attention(Session& session, const AttentionCaptureRequest& req);

}  // namespace flashscope

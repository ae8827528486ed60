// The traced head's attention token by token, for a trace of a model's own
// attention (its prob_samples cover every block of a short conversation, the
// diagonal blocks and the first key block of a long one): the rows × keys
// probabilities the token map draws, a zoomed window's groups of tokens, and
// which rows are an answer's decode steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

struct TokenMatrix {
  enum : uint8_t { kAbsent = 0, kSampled = 1, kMasked = 2 };
  int rows = 0, keys = 0;        // q_len × kv_len of the trace
  std::vector<float> prob;       // [rows × keys]; 0 where masked or absent
  std::vector<uint8_t> state;    // [rows × keys]: kAbsent, kSampled or kMasked
  int sampled = 0;               // pairs with a probability
  float max_prob = 0.0f;

  size_t index(int r, int k) const { return static_cast<size_t>(r) * keys + k; }
  float at(int r, int k) const { return prob[index(r, k)]; }
  uint8_t at_state(int r, int k) const { return state[index(r, k)]; }
};

// The traced head's (meta.traced_head, batch 0) probability samples as a
// matrix; empty (rows = 0) for a trace whose q_len × kv_len passes max_pairs.
TokenMatrix build_token_matrix(const Trace& t, int64_t max_pairs = int64_t{1} << 22);

// A group of rows [r0, r1) × keys [k0, k1) drawn as one cell when zoomed out:
// the largest sampled probability in it (-1 when every pair is masked, -2
// when none is sampled).
float group_max(const TokenMatrix& m, int r0, int r1, int k0, int k1);

// The token map's window: at zoom z each axis shows ceil(n / 2^z) of its n
// tokens (z = 0: the whole conversation), from (first_row, first_key).
struct TokenWindow {
  int zoom = 0;
  int first_row = 0, first_key = 0;
};
int tokens_in_view(int n, int zoom);
// Keeps the window inside rows × keys.
void clamp_window(TokenWindow& w, int rows, int keys);
// Zooms by `steps` (> 0: in), clamped to [0, max_zoom], keeping the token at
// (row, key) where it was on screen (as a share of the window), then clamps.
void zoom_window(TokenWindow& w, int rows, int keys, int steps, int row, int key, int max_zoom);

// Labels along an axis of cells `cell_px` apart, each `label_px` long: every
// step-th cell is labelled, step a power of two so labels never overlap;
// 0 (no labels) when the step would pass max_step (tokens too small to name).
int label_step(float cell_px, float label_px, int max_step = 4);

// The rows whose query is at key position ≥ first_key (an answer's decode
// steps: their keys are the whole conversation before them), in row order.
std::vector<int> rows_from_key(const Trace& t, int first_key);

// The answer's decode steps as the decode kernel ran them: row i of the
// result is row rows[i] of `t` (whose matrix is `m`), over t's keys. Where
// `step_traces` holds a trace of that row's step alone (the CUDA capture's
// HeadCapture::decode_steps: q_len 1 over the keys up to the row's own, the
// split-KV plan the step had; its one row's key names the step), the
// probabilities are that trace's and the keys after the row's are masked;
// other rows are m's (the CPU engine's trace: its rows are its decode
// steps' own numbers). *own (when given): the rows taken from step traces.
TokenMatrix step_rows_matrix(const TokenMatrix& m, const Trace& t, const std::vector<int>& rows,
                             const std::vector<Trace>& step_traces, int* own = nullptr);

// The key whose token covers byte `byte` of `text`, text being found as the
// last passage of the conversation's concatenated token texts equal to it (a
// chat message as the chat shows it: the latest one when it was said twice);
// -1 when the text does not occur there or byte is outside it.
int key_at_text(const Trace& t, const std::string& text, int byte);
// The row whose query is key `key` (TraceTokens::row_keys); -1 when none.
int row_of_key(const Trace& t, int key);

// Row r's `n` most probable sampled keys, most probable first.
std::vector<std::pair<int, float>> top_row_keys(const TokenMatrix& m, int r, int n);

}  // namespace flashscope::viz

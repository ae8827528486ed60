// The token map's matrix (viz/token_matrix.hpp).
#include "viz/token_matrix.hpp"

#include <algorithm>

namespace flashscope::viz {

TokenMatrix build_token_matrix(const Trace& t, int64_t max_pairs) {
  TokenMatrix m;
  const int64_t rows = t.meta.q_len, keys = t.meta.kv_len;
  if (rows <= 0 || keys <= 0 || rows * keys > max_pairs) return m;
  m.rows = static_cast<int>(rows);
  m.keys = static_cast<int>(keys);
  m.prob.assign(static_cast<size_t>(rows * keys), 0.0f);
  m.state.assign(static_cast<size_t>(rows * keys), TokenMatrix::kAbsent);
  const auto head = static_cast<uint32_t>(t.meta.traced_head);
  for (const ProbSampleRecord& s : t.prob_samples) {
    if (s.batch != 0 || s.head != head || s.row >= rows || s.key >= keys) continue;
    const size_t i = m.index(static_cast<int>(s.row), static_cast<int>(s.key));
    if (m.state[i] == TokenMatrix::kAbsent && !(s.flags & ProbSampleRecord::kMasked)) ++m.sampled;
    if (s.flags & ProbSampleRecord::kMasked) {
      m.state[i] = TokenMatrix::kMasked;
      m.prob[i] = 0.0f;
    } else {
      m.state[i] = TokenMatrix::kSampled;
      m.prob[i] = s.prob;
      m.max_prob = std::max(m.max_prob, s.prob);
    }
  }
  return m;
}

float group_max(const TokenMatrix& m, int r0, int r1, int k0, int k1) {
  float best = -2.0f;
  for (int r = std::max(r0, 0); r < std::min(r1, m.rows); ++r) {
    for (int k = std::max(k0, 0); k < std::min(k1, m.keys); ++k) {
      const uint8_t s = m.at_state(r, k);
      if (s == TokenMatrix::kSampled) best = std::max(best, m.at(r, k));
      else if (s == TokenMatrix::kMasked) best = std::max(best, -1.0f);
    }
  }
  return best;
}

int tokens_in_view(int n, int zoom) {
  zoom = std::clamp(zoom, 0, 30);
  return std::max(1, static_cast<int>((static_cast<int64_t>(n) + (int64_t{1} << zoom) - 1) >> zoom));
}

void clamp_window(TokenWindow& w, int rows, int keys) {
  w.first_row = std::clamp(w.first_row, 0, std::max(0, rows - tokens_in_view(rows, w.zoom)));
  w.first_key = std::clamp(w.first_key, 0, std::max(0, keys - tokens_in_view(keys, w.zoom)));
}

void zoom_window(TokenWindow& w, int rows, int keys, int steps, int row, int key, int max_zoom) {
  const int vr = tokens_in_view(rows, w.zoom), vk = tokens_in_view(keys, w.zoom);
  const double fr = static_cast<double>(row - w.first_row) / vr, fk = static_cast<double>(key - w.first_key) / vk;
  w.zoom = std::clamp(w.zoom + steps, 0, std::max(0, max_zoom));
  w.first_row = row - static_cast<int>(fr * tokens_in_view(rows, w.zoom));
  w.first_key = key - static_cast<int>(fk * tokens_in_view(keys, w.zoom));
  clamp_window(w, rows, keys);
}

int label_step(float cell_px, float label_px, int max_step) {
  if (!(cell_px > 0.0f)) return 0;
  int step = 1;
  while (step * cell_px < label_px) {
    step *= 2;
    if (step > max_step) return 0;
  }
  return step;
}

std::vector<int> rows_from_key(const Trace& t, int first_key) {
  std::vector<int> out;
  if (first_key < 0) return out;
  for (size_t i = 0; i < t.tokens.row_keys.size(); ++i) {
    if (static_cast<int64_t>(t.tokens.row_keys[i]) >= first_key) out.push_back(static_cast<int>(i));
  }
  return out;
}

TokenMatrix step_rows_matrix(const TokenMatrix& m, const Trace& t, const std::vector<int>& rows,
                             const std::vector<Trace>& step_traces, int* own) {
  TokenMatrix out;
  if (own != nullptr) *own = 0;
  out.rows = static_cast<int>(rows.size());
  out.keys = m.keys;
  out.prob.assign(static_cast<size_t>(out.rows) * static_cast<size_t>(out.keys), 0.0f);
  out.state.assign(out.prob.size(), TokenMatrix::kAbsent);
  for (int i = 0; i < out.rows; ++i) {
    const int row = rows[static_cast<size_t>(i)];
    const int key = row >= 0 && static_cast<size_t>(row) < t.tokens.row_keys.size()
                        ? static_cast<int>(t.tokens.row_keys[static_cast<size_t>(row)])
                        : -1;
    const Trace* step = nullptr;
    for (const Trace& s : step_traces) {
      if (s.meta.q_len == 1 && s.tokens.row_keys.size() == 1 && static_cast<int>(s.tokens.row_keys[0]) == key) {
        step = &s;
        break;
      }
    }
    if (step == nullptr) {  // the main trace's row, as it is
      if (row < 0 || row >= m.rows) continue;
      for (int k = 0; k < out.keys; ++k) {
        out.prob[out.index(i, k)] = m.at(row, k);
        out.state[out.index(i, k)] = m.at_state(row, k);
      }
      continue;
    }
    if (own != nullptr) ++*own;
    for (int k = key + 1; k < out.keys; ++k) out.state[out.index(i, k)] = TokenMatrix::kMasked;
    const auto head = static_cast<uint32_t>(step->meta.traced_head);
    for (const ProbSampleRecord& s : step->prob_samples) {
      if (s.batch != 0 || s.head != head || s.row != 0 || s.key >= static_cast<uint32_t>(out.keys)) continue;
      const size_t at = out.index(i, static_cast<int>(s.key));
      if (s.flags & ProbSampleRecord::kMasked) {
        out.state[at] = TokenMatrix::kMasked;
        out.prob[at] = 0.0f;
      } else {
        out.state[at] = TokenMatrix::kSampled;
        out.prob[at] = s.prob;
      }
    }
  }
  for (size_t at = 0; at < out.prob.size(); ++at) {
    if (out.state[at] != TokenMatrix::kSampled) continue;
    ++out.sampled;
    out.max_prob = std::max(out.max_prob, out.prob[at]);
  }
  return out;
}

std::vector<std::pair<int, float>> top_row_keys(const TokenMatrix& m, int r, int n) {
  std::vector<std::pair<int, float>> out;
  if (r < 0 || r >= m.rows) return out;
  for (int k = 0; k < m.keys; ++k) {
    if (m.at_state(r, k) == TokenMatrix::kSampled) out.emplace_back(k, m.at(r, k));
  }
  const size_t keep = std::min(out.size(), static_cast<size_t>(std::max(n, 0)));
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep), out.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
  out.resize(keep);
  return out;
}

int key_at_text(const Trace& t, const std::string& text, int byte) {
  if (text.empty() || byte < 0 || static_cast<size_t>(byte) >= text.size()) return -1;
  std::string all;
  std::vector<size_t> start;  // byte where each key's text begins in `all`
  start.reserve(t.tokens.keys.size());
  for (const TraceToken& k : t.tokens.keys) {
    start.push_back(all.size());
    all += k.text;
  }
  const size_t at = all.rfind(text);
  if (at == std::string::npos) return -1;
  const size_t target = at + static_cast<size_t>(byte);
  // The last key starting at or before the byte (keys with empty text start where the next does).
  const auto it = std::upper_bound(start.begin(), start.end(), target);
  return static_cast<int>(it - start.begin()) - 1;
}

int row_of_key(const Trace& t, int key) {
  if (key < 0) return -1;
  for (size_t i = 0; i < t.tokens.row_keys.size(); ++i) {
    if (static_cast<int>(t.tokens.row_keys[i]) == key) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace flashscope::viz

// viz/token_matrix: the token map's probabilities, zoomed groups, label
// spacing and the answer's decode rows.
#include <doctest/doctest.h>

#include <vector>

#include "viz/token_matrix.hpp"

namespace fs = flashscope;

namespace {

// A causal 3-row × 4-key trace of head 1 (rows are the last three keys),
// with every pair sampled, plus one sample of another head that must be ignored.
fs::Trace small_trace() {
  fs::Trace t;
  t.meta.q_len = 3;
  t.meta.kv_len = 4;
  t.meta.traced_head = 1;
  const float p[3][4] = {{0.25f, 0.75f, 0, 0}, {0.5f, 0.125f, 0.375f, 0}, {0.1f, 0.2f, 0.3f, 0.4f}};
  for (uint32_t r = 0; r < 3; ++r) {
    for (uint32_t k = 0; k < 4; ++k) {
      fs::ProbSampleRecord s;
      s.head = 1;
      s.row = r;
      s.key = k;
      s.prob = p[r][k];
      s.flags = k > r + 1 ? fs::ProbSampleRecord::kMasked : 0;
      t.prob_samples.push_back(s);
    }
  }
  fs::ProbSampleRecord other;
  other.head = 0;
  other.row = 0;
  other.key = 3;
  other.prob = 0.9f;
  t.prob_samples.push_back(other);
  t.tokens.keys = {{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}};
  t.tokens.row_keys = {1, 2, 3};
  return t;
}

}  // namespace

TEST_CASE("viz token matrix: every sampled pair of the traced head, masked pairs apart") {
  const fs::viz::TokenMatrix m = fs::viz::build_token_matrix(small_trace());
  REQUIRE(m.rows == 3);
  REQUIRE(m.keys == 4);
  CHECK(m.sampled == 9);
  CHECK(m.at(0, 1) == doctest::Approx(0.75f));
  CHECK(m.at_state(0, 2) == fs::viz::TokenMatrix::kMasked);
  CHECK(m.at_state(0, 3) == fs::viz::TokenMatrix::kMasked);  // head 0's 0.9 is not this head's
  CHECK(m.at(0, 3) == 0.0f);
  CHECK(m.max_prob == doctest::Approx(0.75f));
  // A trace too large for a matrix gives none.
  CHECK(fs::viz::build_token_matrix(small_trace(), 11).rows == 0);
}

TEST_CASE("viz token matrix: zoomed-out groups show their largest probability") {
  const fs::viz::TokenMatrix m = fs::viz::build_token_matrix(small_trace());
  CHECK(fs::viz::group_max(m, 0, 2, 0, 2) == doctest::Approx(0.75f));
  CHECK(fs::viz::group_max(m, 0, 1, 2, 4) == -1.0f);  // all masked
  fs::Trace sparse = small_trace();
  sparse.prob_samples.resize(4);  // row 0 only
  CHECK(fs::viz::group_max(fs::viz::build_token_matrix(sparse), 1, 3, 0, 4) == -2.0f);  // not sampled
  const auto top = fs::viz::top_row_keys(m, 2, 2);
  REQUIRE(top.size() == 2);
  CHECK(top[0].first == 3);
  CHECK(top[1].first == 2);
}

TEST_CASE("viz token matrix: labels where there is room, none when tokens are too small") {
  CHECK(fs::viz::label_step(20.0f, 15.0f) == 1);
  CHECK(fs::viz::label_step(10.0f, 15.0f) == 2);
  CHECK(fs::viz::label_step(4.0f, 15.0f) == 4);
  CHECK(fs::viz::label_step(2.0f, 15.0f) == 0);
  CHECK(fs::viz::label_step(0.0f, 15.0f) == 0);
}

TEST_CASE("viz token matrix: the answer's decode rows are those from its first fed key on") {
  const fs::Trace t = small_trace();
  CHECK(fs::viz::rows_from_key(t, 2) == std::vector<int>{1, 2});
  CHECK(fs::viz::rows_from_key(t, 9).empty());
  CHECK(fs::viz::rows_from_key(t, -1).empty());
}

// The CUDA capture traces each decode step again alone (q_len 1 over its
// keys, its split-KV plan): the step strip draws those numbers, not the
// whole-conversation run's, and keeps the main trace's row where no step trace is.
TEST_CASE("viz token matrix: decode steps drawn from their own traces where the capture has them") {
  const fs::Trace t = small_trace();
  const fs::viz::TokenMatrix m = fs::viz::build_token_matrix(t);
  const std::vector<int> rows = fs::viz::rows_from_key(t, 2);  // rows 1 and 2: keys 2 and 3
  REQUIRE(rows == std::vector<int>{1, 2});
  auto step = [](uint32_t key, std::vector<float> p) {
    fs::Trace s;
    s.meta.q_len = 1;
    s.meta.kv_len = static_cast<int>(key) + 1;
    s.meta.traced_head = 1;
    for (uint32_t k = 0; k <= key; ++k) {
      fs::ProbSampleRecord r;
      r.head = 1;
      r.key = k;
      r.prob = p[k];
      s.prob_samples.push_back(r);
    }
    fs::ProbSampleRecord other;  // another head's: ignored
    other.head = 0;
    other.key = 1;
    other.prob = 0.99f;
    s.prob_samples.push_back(other);
    s.tokens.row_keys = {key};
    return s;
  };
  // Key 2's step (main row 1: 0.5, 0.125, 0.375), and key 1's, which is no answer row.
  const std::vector<fs::Trace> steps = {step(1, {0.4f, 0.6f}), step(2, {0.1f, 0.3f, 0.6f})};
  int own = -1;
  const fs::viz::TokenMatrix s = fs::viz::step_rows_matrix(m, t, rows, steps, &own);
  CHECK(own == 1);
  REQUIRE(s.rows == 2);
  REQUIRE(s.keys == 4);
  CHECK(s.at(0, 0) == doctest::Approx(0.1f));
  CHECK(s.at(0, 1) == doctest::Approx(0.3f));
  CHECK(s.at(0, 2) == doctest::Approx(0.6f));
  CHECK(s.at_state(0, 3) == fs::viz::TokenMatrix::kMasked);  // after the step's own key
  for (int k = 0; k < 4; ++k) {  // no trace of key 3's step: the main row
    CHECK(s.at(1, k) == m.at(2, k));
    CHECK(s.at_state(1, k) == m.at_state(2, k));
  }
  CHECK(s.sampled == 3 + 4);
  CHECK(s.max_prob == doctest::Approx(0.6f));
  CHECK(fs::viz::top_row_keys(s, 0, 1)[0].first == 2);  // the main trace's row 1 says key 0
  // No step traces (the CPU engine): the main trace's rows.
  const fs::viz::TokenMatrix cpu = fs::viz::step_rows_matrix(m, t, rows, {}, &own);
  CHECK(own == 0);
  CHECK(cpu.at(0, 2) == m.at(1, 2));
  CHECK(cpu.sampled == 3 + 4);
}

TEST_CASE("viz token matrix: a byte of a chat message names its token and row") {
  fs::Trace t;
  t.tokens.keys = {{1, "<s>"}, {2, "The"}, {3, " fox"}, {4, "\n"}, {5, "The"}, {6, " fox"}, {7, " ran"}};
  t.tokens.row_keys = {4, 5, 6};
  // "The fox ran" occurs once: its 'f' (byte 4) is key 5's " fox".
  CHECK(fs::viz::key_at_text(t, "The fox ran", 4) == 5);
  CHECK(fs::viz::row_of_key(t, 5) == 1);
  // "The fox" is said twice: the latest is meant.
  CHECK(fs::viz::key_at_text(t, "The fox", 0) == 4);
  CHECK(fs::viz::key_at_text(t, "The fox", 3) == 5);  // the blank belongs to " fox"
  CHECK(fs::viz::key_at_text(t, "a wolf", 0) == -1);
  CHECK(fs::viz::key_at_text(t, "The fox", 7) == -1);
  CHECK(fs::viz::row_of_key(t, 1) == -1);
}

TEST_CASE("viz token matrix: the map zooms from the whole conversation to single tokens around the pointer") {
  const int rows = 200, keys = 200;
  fs::viz::TokenWindow w;
  CHECK(fs::viz::tokens_in_view(keys, 0) == 200);  // zoom 0: everything
  CHECK(fs::viz::tokens_in_view(keys, 3) == 25);
  CHECK(fs::viz::tokens_in_view(keys, 8) == 1);    // a single token
  // Zooming in at token (150, 100) keeps it at the same share of the window.
  fs::viz::zoom_window(w, rows, keys, 2, 150, 100, 8);
  CHECK(w.zoom == 2);
  CHECK(w.first_row == 150 - 37);  // 150/200 of the old window → 0.75 · 50 of the new one
  CHECK(w.first_key == 100 - 25);
  // Back out: the whole conversation again, from the top-left.
  fs::viz::zoom_window(w, rows, keys, -5, 150, 100, 8);
  CHECK(w.zoom == 0);
  CHECK(w.first_row == 0);
  CHECK(w.first_key == 0);
  // Near the end the window stops at the last token; past max zoom it stays there.
  fs::viz::zoom_window(w, rows, keys, 20, 199, 199, 8);
  CHECK(w.zoom == 8);
  CHECK(w.first_row == 199);
  CHECK(w.first_key == 199);
  w.first_row = -5;
  w.first_key = 500;
  fs::viz::clamp_window(w, rows, keys);
  CHECK(w.first_row == 0);
  CHECK(w.first_key == 199);
}

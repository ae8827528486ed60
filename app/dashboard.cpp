#include "dashboard.hpp"

#include <imgui.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

#include "flashscope/attention.hpp"

namespace flashscope::app {

namespace {

constexpr const char* kTabNames[] = {"Attention tiles", "Online softmax", "Pipeline", "Throughput", "Kernel lab"};

std::string normalized(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

void wrapped_muted(const char* text) {
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
  ImGui::TextWrapped("%s", text);
  ImGui::PopStyleColor();
}

// "What this tab will show", set apart so nobody mistakes it for data.
void planned_note(const char* what, const UiFonts& fonts) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float wrap = ImGui::GetContentRegionAvail().x - 2.0f * style.WindowPadding.x;
  ImGui::PushFont(fonts.title);
  const float title_h = ImGui::GetTextLineHeight();
  ImGui::PopFont();
  const float h = title_h + style.ItemSpacing.y + ImGui::CalcTextSize(what, nullptr, false, wrap).y +
                  2.0f * style.WindowPadding.y;
  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  ImGui::BeginChild("##planned", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  ImGui::PushFont(fonts.title);
  ImGui::TextColored(palette::kWarning, "Coming with the probe traces");
  ImGui::PopFont();
  ImGui::TextWrapped("%s", what);
  ImGui::EndChild();
  ImGui::PopStyleColor();
}

void heading(const char* text, const UiFonts& fonts) {
  ImGui::Spacing();
  ImGui::PushFont(fonts.title);
  ImGui::TextUnformatted(text);
  ImGui::PopFont();
}

constexpr const char* kSolExplainer =
    "With a GPU this card shows its speed of light, read off the device: SOL TFLOPS = SMs × max SM clock × "
    "tensor FLOPs/clock/SM (BF16 dense, FP32 accumulate); DRAM GB/s = memory clock × 2 × bus width / 8.";

// The device and its SOL: a title line, one line of numbers, and the
// formula (GPU) or what is missing and why (CPU). Sized to its text.
void draw_device_card(const DeviceSummary& device, const UiFonts& fonts) {
  const ImGuiStyle& style = ImGui::GetStyle();
  const float wrap = ImGui::GetContentRegionAvail().x - 2.0f * style.WindowPadding.x;
  ImGui::PushFont(fonts.title);
  const float title_h = ImGui::GetTextLineHeight();
  ImGui::PopFont();
  ImGui::PushFont(fonts.mono);
  const float mono_h = ImGui::GetTextLineHeight();
  const float formula_h = device.cuda ? ImGui::CalcTextSize(device.info.sol_formula.c_str(), nullptr, false, wrap).y : 0;
  ImGui::PopFont();
  const float body_h = device.cuda ? formula_h : ImGui::CalcTextSize(kSolExplainer, nullptr, false, wrap).y;
  const float h = title_h + mono_h + body_h + 2.0f * style.ItemSpacing.y + 2.0f * style.WindowPadding.y;

  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  ImGui::BeginChild("##device", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  if (device.cuda) {
    const DeviceInfo& d = device.info;
    ImGui::PushFont(fonts.title);
    ImGui::TextColored(palette::kAccent, "%s", d.name.c_str());
    ImGui::PopFont();
    ImGui::SameLine();
    ImGui::TextColored(palette::kMuted, "sm_%d%d · %d SMs · %.2f GHz · %.0f GiB · L2 %d MiB", d.cc_major, d.cc_minor,
                       d.sm_count, d.sm_clock_ghz, d.global_mem_gib, d.l2_mib);
    ImGui::PushFont(fonts.mono);
    ImGui::Text("SOL tensor %.1f TFLOPS (BF16 dense, FP32 accumulate)   SOL DRAM %.0f GB/s", d.sol_tflops,
                d.sol_dram_gbps);
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kMuted);
    ImGui::TextWrapped("%s", d.sol_formula.c_str());
    ImGui::PopStyleColor();
    ImGui::PopFont();
  } else {
    ImGui::PushFont(fonts.title);
    ImGui::TextColored(palette::kWarning, "CPU backend: no CUDA device");
    ImGui::PopFont();
    ImGui::SameLine();
    ImGui::TextColored(palette::kMuted, "%s · %u hardware threads", device.cpu_name.empty() ? "CPU" :
                       device.cpu_name.c_str(), device.cpu_threads);
    ImGui::PushFont(fonts.mono);
    ImGui::TextColored(palette::kMuted, "query_device: %s", device.why_not.c_str());
    ImGui::PopFont();
    wrapped_muted(kSolExplainer);
  }
  ImGui::EndChild();
  ImGui::PopStyleColor();
}

// Which tiles a causal prefill computes: q-tiles of the new tokens (rows)
// against kv-tiles of everything in the cache (columns). A tile is skipped
// when all its keys come after all its queries, masked when the diagonal
// crosses it, full otherwise.
struct TileCounts {
  int rows = 0, cols = 0, full = 0, masked = 0, skipped = 0;
};
enum class TileKind { kFull, kMasked, kSkipped };

TileKind tile_kind(int r, int c, int tile, int q_len, int kv_offset) {
  const int q0 = kv_offset + r * tile;  // query positions of the row, in the whole sequence
  const int q1 = std::min(kv_offset + q_len, q0 + tile) - 1;
  const int k0 = c * tile;
  const int k1 = std::min(kv_offset + q_len, k0 + tile) - 1;
  if (k0 > q1) return TileKind::kSkipped;
  if (k1 > q0) return TileKind::kMasked;
  return TileKind::kFull;
}

TileCounts count_tiles(int tile, int q_len, int kv_offset) {
  TileCounts t;
  t.rows = (q_len + tile - 1) / tile;
  t.cols = (kv_offset + q_len + tile - 1) / tile;
  for (int r = 0; r < t.rows; ++r) {
    for (int c = 0; c < t.cols; ++c) {
      switch (tile_kind(r, c, tile, q_len, kv_offset)) {
        case TileKind::kFull: ++t.full; break;
        case TileKind::kMasked: ++t.masked; break;
        case TileKind::kSkipped: ++t.skipped; break;
      }
    }
  }
  return t;
}

void draw_tile_map(const EngineSnapshot& snap, const UiFonts& fonts) {
  constexpr int kTile = 64;
  constexpr int kExampleTokens = 512;
  const int last_q = snap.answer_prompt_tokens;
  const int last_offset = snap.answer_reused_tokens;
  // A prefill of a few tiles makes a dull map: draw an example then, and
  // give the last prefill's numbers in words.
  const bool example = (last_q + kTile - 1) / kTile < 4;
  const int q_len = example ? kExampleTokens : last_q;
  const int kv_offset = example ? 0 : last_offset;
  int tile = kTile;
  while ((kv_offset + q_len + tile - 1) / tile > 48) tile *= 2;  // keep the grid readable
  const TileCounts t = count_tiles(tile, q_len, kv_offset);

  char title[160];
  if (example) {
    std::snprintf(title, sizeof title, "Causal tile map — a %d-token prompt, %d×%d tiles", q_len, tile, tile);
  } else {
    std::snprintf(title, sizeof title, "Causal tile map — last prefill: %d new tokens after %d cached", q_len,
                  kv_offset);
  }
  heading(title, fonts);

  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float legend_h = ImGui::GetTextLineHeightWithSpacing() * 3.5f;
  const float fit = std::min((avail.x - 8.0f) / t.cols, (avail.y - legend_h) / std::max(t.rows, 1));
  const float cell_px = std::clamp(fit, 2.0f, 40.0f * ImGui::GetFontSize() / 16.0f);
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImU32 colors[] = {ImGui::GetColorU32(ImVec4(0.40f, 0.62f, 0.05f, 1.0f)),   // full
                          ImGui::GetColorU32(ImVec4(0.85f, 0.62f, 0.20f, 1.0f)),   // masked
                          ImGui::GetColorU32(ImVec4(0.18f, 0.19f, 0.21f, 1.0f))};  // skipped
  for (int r = 0; r < t.rows; ++r) {
    for (int c = 0; c < t.cols; ++c) {
      const ImU32 col = colors[static_cast<int>(tile_kind(r, c, tile, q_len, kv_offset))];
      const ImVec2 a(origin.x + c * cell_px, origin.y + r * cell_px);
      dl->AddRectFilled(a, ImVec2(a.x + cell_px - 1.0f, a.y + cell_px - 1.0f), col);
    }
  }
  ImGui::Dummy(ImVec2(t.cols * cell_px, t.rows * cell_px));
  auto swatch = [&](ImU32 color, const char* label) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float s = ImGui::GetTextLineHeight() * 0.8f;
    dl->AddRectFilled(ImVec2(p.x, p.y + s * 0.15f), ImVec2(p.x + s, p.y + s * 1.15f), color, 2.0f);
    ImGui::Dummy(ImVec2(s, s));
    ImGui::SameLine();
    ImGui::TextUnformatted(label);
    ImGui::SameLine(0.0f, ImGui::GetStyle().ItemSpacing.x * 3.0f);
  };
  char buf[64];
  std::snprintf(buf, sizeof buf, "full %d", t.full);
  swatch(colors[0], buf);
  std::snprintf(buf, sizeof buf, "diagonal (masked) %d", t.masked);
  swatch(colors[1], buf);
  std::snprintf(buf, sizeof buf, "skipped %d", t.skipped);
  swatch(colors[2], buf);
  ImGui::NewLine();
  ImGui::TextColored(palette::kMuted, "Rows are q-tiles, columns kv-tiles; computed from the shape, not a trace. "
                     "Skipping saves %.0f%% of the square.", 100.0 * t.skipped / std::max(1, t.rows * t.cols));
  if (example && last_q > 0) {
    const TileCounts last = count_tiles(kTile, last_q, last_offset);
    ImGui::TextColored(palette::kMuted, "Last prefill: %d new tokens after %d cached → %d×%d tiles of %d (%d full, "
                       "%d masked, %d skipped).", last_q, last_offset, last.rows, last.cols, kTile, last.full,
                       last.masked, last.skipped);
  }
}

void tab_attention_tiles(const EngineSnapshot& snap, const UiFonts& fonts) {
  planned_note("Attention mass per (q-tile, kv-tile) for a chosen head, read from a probe trace; the tiles the "
               "causal mask skips; which SM ran each CTA and when. Traces captured on a GPU open here on any "
               "machine.",
               fonts);
  draw_tile_map(snap, fonts);
}

void tab_online_softmax(const EngineSnapshot& snap, const UiFonts& fonts) {
  planned_note("For selected query rows, the running max m, the running sum l and the rescale factor "
               "exp(m_old − m_new) after every KV tile, from a probe trace — on a GPU, or from the CPU path's "
               "tiled backend, which records the same state.",
               fonts);
  heading("The recurrence each row runs, one KV tile at a time", fonts);
  ImGui::PushFont(fonts.mono);
  ImGui::PushStyleColor(ImGuiCol_ChildBg, palette::kCard);
  const float h = ImGui::GetTextLineHeightWithSpacing() * 9.0f + ImGui::GetStyle().WindowPadding.y * 2.0f;
  ImGui::BeginChild("##recurrence", ImVec2(0.0f, h), true, ImGuiWindowFlags_NoScrollbar);
  ImGui::TextUnformatted("m = −∞,  l = 0,  O = 0                         per query row, in registers");
  ImGui::TextUnformatted("for each KV tile j:");
  ImGui::TextUnformatted("  S   = Q·Kⱼᵀ × scale                          Br × Bc scores (mma.m16n8k16)");
  ImGui::TextUnformatted("  m'  = max(m, rowmax(S))");
  ImGui::TextUnformatted("  P   = exp(S − m')                            exp2 with log2(e) folded into scale");
  ImGui::TextUnformatted("  l   = l · exp(m − m') + rowsum(P)");
  ImGui::TextUnformatted("  O   = O · exp(m − m') + P·Vⱼ                 rescale, then accumulate");
  ImGui::TextUnformatted("  m   = m'");
  ImGui::TextUnformatted("O = O / l,   LSE = m + log(l)                  one division per row, at the end");
  ImGui::EndChild();
  ImGui::PopStyleColor();
  ImGui::PopFont();
  if (snap.state != EngineState::kFailed && snap.state != EngineState::kLoading) {
    const ModelConfig& c = snap.config;
    ImGui::TextColored(palette::kMuted, "%s: %d q-heads over %d kv-heads (GQA %d:1), head_dim %d, scale 1/√%d.",
                       snap.model_name.c_str(), c.n_heads, c.n_kv_heads,
                       c.n_kv_heads > 0 ? c.n_heads / c.n_kv_heads : 0, c.head_dim, c.head_dim);
  }
}

void tab_pipeline(const UiFonts& fonts) {
  planned_note("Per-warp timelines of selected CTAs: each K/V tile's cp.async issue and wait, the QKᵀ MMA, "
               "softmax, the PV MMA and the epilogue — so the overlap that v3..v6 add is visible — and CTA start "
               "and end per SM for occupancy.",
               fonts);
  heading("Stages and their colours on the timeline", fonts);
  struct Stage {
    const char* name;
    ImVec4 color;
    const char* what;
  };
  const Stage stages[] = {
      {"K/V load", ImVec4(0.30f, 0.55f, 0.95f, 1.0f), "cp.async global → shared, issue to wait_group"},
      {"QKᵀ MMA", ImVec4(0.46f, 0.73f, 0.00f, 1.0f), "ldmatrix + mma.m16n8k16, scores in registers"},
      {"softmax", ImVec4(0.95f, 0.70f, 0.20f, 1.0f), "row max, exp2, rescale of l and O"},
      {"PV MMA", ImVec4(0.20f, 0.75f, 0.65f, 1.0f), "P (bf16) × V tile into the O accumulator"},
      {"epilogue", ImVec4(0.75f, 0.45f, 0.90f, 1.0f), "O / l, LSE, store to global"},
      {"barrier / idle", ImVec4(0.30f, 0.31f, 0.34f, 1.0f), "__syncthreads, waiting on a load"},
  };
  if (ImGui::BeginTable("##stages", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH)) {
    ImGui::TableSetupColumn("stage", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 9.0f);
    ImGui::TableSetupColumn("what the span covers");
    ImGui::TableHeadersRow();
    for (const Stage& s : stages) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const float sz = ImGui::GetTextLineHeight();
      ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + sz * 0.15f), ImVec2(p.x + sz * 1.6f, p.y + sz * 0.85f),
                                                ImGui::GetColorU32(s.color), 2.0f);
      ImGui::Dummy(ImVec2(sz * 1.6f, sz));
      ImGui::SameLine();
      ImGui::TextUnformatted(s.name);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(s.what);
    }
    ImGui::EndTable();
  }
}

// One bar per answer, the last kSlots of them, left-aligned in kSlots
// slots so one answer is one narrow bar rather than a full-width block.
void answer_histogram(const char* id, const std::vector<float>& values, const char* overlay, float max, float height) {
  constexpr int kSlots = 24;
  struct Window {
    const std::vector<float>* v;
    size_t first;
  };
  Window w{&values, values.size() > kSlots ? values.size() - kSlots : 0};
  auto getter = [](void* data, int i) -> float {
    const auto* win = static_cast<const Window*>(data);
    const size_t k = win->first + static_cast<size_t>(i);
    return k < win->v->size() ? (*win->v)[k] : 0.0f;
  };
  ImGui::PlotHistogram(id, getter, &w, kSlots, 0, overlay, 0.0f, max, ImVec2(ImGui::GetContentRegionAvail().x, height));
}

// The latest answers, newest first.
void draw_answer_table(const Metrics& m, const UiFonts& fonts) {
  constexpr int kRows = 6;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("##answers", 6, flags)) return;
  for (const char* h : {"answer", "tokens", "decode tok/s", "prefill", "TTFT", "ended"}) ImGui::TableSetupColumn(h);
  ImGui::TableHeadersRow();
  ImGui::PushFont(fonts.mono);
  const int n = static_cast<int>(m.answers.size());
  for (int i = n - 1; i >= 0 && i >= n - kRows; --i) {
    const AnswerStats& a = m.answers[static_cast<size_t>(i)];
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("#%d", i + 1);
    ImGui::TableNextColumn();
    ImGui::Text("%d", a.generated_tokens);
    ImGui::TableNextColumn();
    ImGui::TextColored(palette::kAccent, "%.1f", a.decode_tokens_per_s);
    ImGui::TableNextColumn();
    ImGui::Text("%d tok · %.0f tok/s", a.prompt_tokens, a.prefill_tokens_per_s);
    ImGui::TableNextColumn();
    ImGui::Text("%.0f ms", a.ttft_ms);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(stop_reason_label(a.stop_reason));
  }
  ImGui::PopFont();
  ImGui::EndTable();
}

void tab_throughput(const EngineSnapshot& snap, const Metrics& m, const UiFonts& fonts) {
  const float plot_h = ImGui::GetTextLineHeight() * 4.5f;
  heading("Decode, live", fonts);
  ImGui::PushFont(fonts.mono);
  if (snap.state == EngineState::kGenerating) {
    ImGui::TextColored(palette::kAccent, "%.1f tokens/s  ·  %d tokens so far", snap.answer_live_tokens_per_s,
                       snap.answer_tokens);
  } else {
    ImGui::TextColored(palette::kMuted, "engine %s", engine_state_name(snap.state));
  }
  ImGui::PopFont();

  heading("Per answer", fonts);
  const size_t n = m.answer_decode_tps.size();
  if (n == 0) {
    wrapped_muted("No answers yet: tokens/s of every answer lands here (decode and prefill, and time to first "
                  "token).");
  } else {
    float best = 0.0f, sum = 0.0f;
    for (const float v : m.answer_decode_tps) {
      best = std::max(best, v);
      sum += v;
    }
    char overlay[96];
    std::snprintf(overlay, sizeof overlay, "decode tok/s per answer · last %.1f · mean %.1f · best %.1f",
                  m.answer_decode_tps.back(), sum / static_cast<float>(n), best);
    answer_histogram("##decode", m.answer_decode_tps, overlay, best * 1.3f, plot_h);
    float best_p = 0.0f;
    for (const float v : m.answer_prefill_tps) best_p = std::max(best_p, v);
    std::snprintf(overlay, sizeof overlay, "prefill tok/s per answer · last %.0f · best %.0f", m.answer_prefill_tps.back(),
                  best_p);
    answer_histogram("##prefill", m.answer_prefill_tps, overlay, best_p * 1.3f, plot_h);
    if (snap.weight_bytes > 0) {
      ImGui::TextColored(palette::kMuted,
                         "Decode reads every weight once per token: %.1f tok/s × %.0f MB ≈ %.2f GB/s of weights.",
                         m.answer_decode_tps.back(), snap.weight_bytes / 1e6,
                         m.answer_decode_tps.back() * snap.weight_bytes / 1e9);
    }
    draw_answer_table(m, fonts);
  }

  heading("UI frame time", fonts);
  float worst = 0.0f;
  for (const float v : m.frame_ms) worst = std::max(worst, v);
  char overlay[128];
  const double busy_mean = m.busy_frames > 0 ? m.busy_frame_ms_sum / m.busy_frames : 0.0;
  if (m.busy_frames > 0) {
    std::snprintf(overlay, sizeof overlay, "%.0f fps now · while generating: mean %.1f ms, worst %.1f ms",
                  ImGui::GetIO().Framerate, busy_mean, m.busy_frame_ms_max);
  } else {
    std::snprintf(overlay, sizeof overlay, "%.0f fps now", ImGui::GetIO().Framerate);
  }
  ImGui::PlotLines("##frames", m.frame_ms.data(), Metrics::kFrameWindow, m.frame_ms_next, overlay, 0.0f,
                   std::max(40.0f, worst * 1.2f), ImVec2(ImGui::GetContentRegionAvail().x, plot_h));
  wrapped_muted("The engine runs on its own thread; the UI reads a snapshot each frame and never waits on it. "
                "With a CUDA device this tab adds prefill TFLOPS (4·Lq·Lk·D·heads, halved for causal) and decode "
                "K/V GB/s for every launch, against the SOL above.");
}

struct KernelRow {
  PrefillKernel kernel;
  const char* adds;
};

void tab_kernel_lab(const DeviceSummary& device, const UiFonts& fonts) {
  planned_note("Switch the prefill kernel (v1..v6, Hopper) on a synthetic problem — length, heads, GQA, causal — "
               "and watch TFLOPS and % of SOL change live, with each config's tile shape and shared memory.",
               fonts);
  heading("The prefill family: each version adds one step of the seed", fonts);
  const KernelRow rows[] = {
      {PrefillKernel::kV1, "mma.m16n8k16 + ldmatrix + cp.async; loads and math do not overlap"},
      {PrefillKernel::kV2, "+ XOR-swizzled shared memory: no bank conflicts on ldmatrix"},
      {PrefillKernel::kV3, "+ 2-stage pipeline: the next K/V tile loads while this one computes"},
      {PrefillKernel::kV4, "+ ldmatrix.x4 for K and V: half the ldmatrix instructions"},
      {PrefillKernel::kV5, "+ K double buffer, single V buffer, larger KV tile (the default)"},
      {PrefillKernel::kV6, "+ K and V double-buffered; Q·K(t+1)ᵀ runs under softmax(t)"},
  };
  if (ImGui::BeginTable("##kernels", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH)) {
    ImGui::TableSetupColumn("config", ImGuiTableColumnFlags_WidthFixed, ImGui::GetFontSize() * 5.0f);
    ImGui::TableSetupColumn("what it adds");
    ImGui::TableHeadersRow();
    for (const KernelRow& r : rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushFont(fonts.mono);
      ImGui::TextColored(palette::kAccent, "%s", prefill_kernel_name(r.kernel));
      ImGui::PopFont();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(r.adds);
    }
    ImGui::EndTable();
  }
  if (!device.cuda) {
    ImGui::Spacing();
    ImGui::TextColored(palette::kWarning, "No CUDA device: the lab's runs need one.");
    wrapped_muted("The CPU path's tiled backend is the reference each config is tested against "
                  "(flashscope-cli bench prefill --device cpu times it).");
  }
}

}  // namespace

const char* dashboard_tab_name(DashboardTab tab) {
  const int i = static_cast<int>(tab);
  return i >= 0 && i < static_cast<int>(DashboardTab::kCount) ? kTabNames[i] : "?";
}

bool parse_dashboard_tab(const std::string& text, DashboardTab* out) {
  const std::string want = normalized(text);
  if (want.empty()) return false;
  int match = -1;
  for (int i = 0; i < static_cast<int>(DashboardTab::kCount); ++i) {
    const std::string name = kTabNames[i];
    bool hit = normalized(name).rfind(want, 0) == 0;  // a prefix of the whole name
    for (size_t start = 0; !hit && start < name.size();) {  // or of one of its words
      const size_t end = name.find(' ', start);
      hit = normalized(name.substr(start, end == std::string::npos ? std::string::npos : end - start)).rfind(want, 0) == 0;
      start = end == std::string::npos ? name.size() : end + 1;
    }
    if (!hit) continue;
    if (match >= 0) return false;  // ambiguous
    match = i;
  }
  if (match < 0) return false;
  *out = static_cast<DashboardTab>(match);
  return true;
}

DeviceSummary query_device_summary() {
  DeviceSummary s;
  s.cpu_threads = std::thread::hardware_concurrency();
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) s.cpu_name = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  if (cuda_available()) {
    auto info = query_device(0);
    if (info.ok()) {
      s.cuda = true;
      s.info = info.value();
      return s;
    }
    s.why_not = info.status().to_string();
    return s;
  }
  auto info = query_device(0);
  s.why_not = info.ok() ? "no device" : info.status().to_string();
  return s;
}

void draw_dashboard(DashboardState& state, const DeviceSummary& device, const EngineSnapshot& snap,
                    const Metrics& metrics, const UiFonts& fonts) {
  ImGui::PushFont(fonts.title);
  ImGui::TextUnformatted("Dashboard");
  ImGui::PopFont();
  draw_device_card(device, fonts);
  if (!ImGui::BeginTabBar("##dashboard_tabs")) return;
  const int requested = state.select_active ? static_cast<int>(state.active) : -1;
  for (int i = 0; i < static_cast<int>(DashboardTab::kCount); ++i) {
    const auto tab = static_cast<DashboardTab>(i);
    const ImGuiTabItemFlags flags = i == requested ? ImGuiTabItemFlags_SetSelected : 0;
    if (!ImGui::BeginTabItem(kTabNames[i], nullptr, flags)) continue;
    state.active = tab;
    ImGui::BeginChild("##tab", ImVec2(0.0f, 0.0f), false);
    switch (tab) {
      case DashboardTab::kAttentionTiles: tab_attention_tiles(snap, fonts); break;
      case DashboardTab::kOnlineSoftmax: tab_online_softmax(snap, fonts); break;
      case DashboardTab::kPipeline: tab_pipeline(fonts); break;
      case DashboardTab::kThroughput: tab_throughput(snap, metrics, fonts); break;
      case DashboardTab::kKernelLab: tab_kernel_lab(device, fonts); break;
      case DashboardTab::kCount: break;
    }
    ImGui::EndChild();
    ImGui::EndTabItem();
  }
  state.select_active = false;
  ImGui::EndTabBar();
}

}  // namespace flashscope::app

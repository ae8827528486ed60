// Where a trace's numbers came from, in words: the device, backend and
// kernel, and the problem's shape — the dashboard prints these above every
// trace-driven view, so a picture is never read without its provenance.
// (Whether it is live or replayed from a file is the app's to add.)
#pragma once

#include <string>

#include "flashscope/trace_records.hpp"
#include "viz/color_scale.hpp"

namespace flashscope::viz {

// "NVIDIA H100 80GB HBM3 · cuda · kernel v6 · 132 SMs" / "CPU (2 threads) · cpu · kernel cpu-tiled"
std::string trace_source_line(const TraceMeta& m);

// "prefill B=1 Hq=9 Hkv=3 Lq=512 Lk=512 D=64 causal bf16 · tiles 64×64 · head 0"
std::string trace_shape_line(const TraceMeta& m);

// Human names of span kinds for legends: "K load (issue)", "QKᵀ MMA", …
const char* span_kind_label(SpanKind k);

// The timeline's colour of each span kind; loads in blues, math in greens,
// softmax amber, epilogue violet, so the overlap of loads and math shows.

Rgb span_kind_color(SpanKind k);

}  // namespace flashscope::viz

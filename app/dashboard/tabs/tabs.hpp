// The dashboard's tabs and the pieces more than one of them draws; private
// to the dashboard (dashboard/dashboard.hpp is the interface). One file per
// tab in this folder: tab_tiles.cpp, tab_softmax.cpp, tab_pipeline.cpp,
// tab_throughput.cpp, tab_lab.cpp; the trace header in dashboard/dashboard.cpp,
// the timelines in dashboard/dash_timeline.cpp.
#pragma once

#include "dashboard/dashboard.hpp"

namespace flashscope::app {

// The header of every trace view: the source picker, where the trace came
// from (device, backend, kernel, "replayed from FILE" or live), its shape
// and note, or — when nothing is shown — how to get a trace. Returns the
// trace to draw, or null.
const Trace* draw_trace_header(DashboardState& s, DashboardContext& ctx, uint64_t* version);

void tab_attention_tiles(DashboardState& s, DashboardContext& ctx);
void tab_online_softmax(DashboardState& s, DashboardContext& ctx);
void tab_pipeline(DashboardState& s, DashboardContext& ctx);
void tab_throughput(DashboardState& s, DashboardContext& ctx);
void tab_kernel_lab(DashboardState& s, DashboardContext& ctx);

// The Attention tab on a trace of the model's own attention (tab_tokens.cpp):
// a tokens/tiles switch, and in the token view the zoomable token map with
// the conversation's tokens on its axes and the selected row's keys.
// Returns true when it drew the view (the tab then draws nothing else).
bool draw_token_attention(DashboardState& s, DashboardContext& ctx, const Trace& t, uint64_t version);

// Rebuilds v's caches when the trace changed (version differs); picks the
// CTA with the most KV tiles among those with spans.
void refresh_pipeline_view(PipelineView& v, const Trace& t, uint64_t version);
// One CTA's warp lanes, its K/V stage buffers and a time axis, `height` tall.
void draw_warp_timeline(DashboardState& s, const Trace& t, const viz::CtaPipeline& p, float height, const char* widget);
// SMs (rows) × time with every CTA, the tail shaded, busy SMs over time below.
void draw_sm_chart(DashboardState& s, const Trace& t, const viz::Occupancy& o, uint32_t highlight_cta, float height,
                   const char* widget);
// The span kinds' colours, with each kind's share of the CTA's warp time.
void draw_span_legend(const viz::CtaPipeline& p);

}  // namespace flashscope::app

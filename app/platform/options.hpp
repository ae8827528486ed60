// Command-line options of the `flashscope` app.
#pragma once

#include <string>

#include "flashscope/model.hpp"

namespace flashscope::app {

struct AppOptions {
  std::string model_path;   // --model; empty: the default model, looked up like the CLI does
  std::string chat_template;  // --chat-template FILE: a Jinja template instead of the model's
  std::string conversation;   // --conversation FILE: a saved conversation opened at start
  int frames = 0;           // --frames N: render N frames (at most, with --prompt) and exit; 0: interactive
  std::string screenshot;   // --screenshot PNG: written after the last frame
  std::string layout;       // --layout JSON: where each panel was drawn on the last frame (tests)
  std::string tab;          // --tab NAME: the dashboard tab to show
  std::string replay;       // --replay TRACE: open a saved trace (docs/trace_format.md) at start
  bool run_lab = false;     // --run-lab: start the kernel lab's loop at start (headless lab pictures)
  std::string prompt;       // --prompt TEXT: sent as the first message
  bool has_prompt = false;
  int max_tokens = 0;       // --max-tokens N: the answer's token limit (0: the settings' default)
  bool has_seed = false;    // --seed S: a fixed sampling seed instead of a fresh one per answer
  unsigned long long seed = 0;
  bool greedy = false;      // --greedy: temperature 0
  float dry_multiplier = -1.0f;  // --dry-multiplier D: DRY as the CLI's flag (0: off); < 0: the default
  int width = 1600;         // --size WxH: window size in pixels at scale 1
  int height = 1000;
  float scale = 0.0f;       // --scale S: UI scale; 0: the monitor's content scale
  int threads = 0;          // --threads N: CPU threads per forward pass; 0: auto
  WeightFormat weights = WeightFormat::kAuto;  // --weights auto|quantized|bf16: how the GPU keeps the weights
  int context = 0;          // --ctx N: KV cache tokens; 0: the model's context length
  bool has_mouse = false;   // --mouse X,Y: the pointer held there (headless hover tests)
  float mouse_x = 0, mouse_y = 0;
  int attention_layer = 0;   // --layer L, --head H: the model's own attention shown (clamped to the model)
  int attention_head = 0;
  bool open_models = false;  // --models: the model picker open at start
  std::string switch_to;     // --switch-to PATH: once the model loaded, switch to PATH (headless tests)
  std::string keys;          // --keys SCRIPT: typed all at once when the model has loaded (headless tests)
  bool help = false;

  bool headless() const { return frames > 0 || !screenshot.empty(); }
};

extern const char* const kAppUsage;

// Parses argv; false with *error set on an unknown flag or a bad value.
// --screenshot without --frames renders a few frames (enough for the layout to settle).
bool parse_app_options(int argc, char** argv, AppOptions* out, std::string* error);

}  // namespace flashscope::app

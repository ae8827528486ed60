#include "platform/options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flashscope::app {

const char* const kAppUsage =
    "usage: flashscope [--model PATH] [--tab NAME] [--replay TRACE] [--run-lab] [--scale S] [--size WxH]\n"
    "                  [--threads N] [--ctx N] [--weights auto|quantized|bf16] [--chat-template FILE]\n"
    "                  [--conversation FILE]\n"
    "                  [--frames N] [--screenshot OUT.png] [--layout OUT.json]\n"
    "                  [--prompt TEXT] [--max-tokens N] [--seed S] [--greedy] [--dry-multiplier D]\n"
    "                  [--models] [--switch-to PATH]\n"
    "                  [--keys SCRIPT]\n"
    "  --model PATH        GGUF model (default: assets/models/SmolLM2-135M-Instruct.Q4_1.gguf)\n"
    "  --tab NAME          dashboard tab: attention, softmax, pipeline, throughput (default), lab\n"
    "  --replay TRACE      open a saved trace (flashscope-cli trace prefill --out TRACE) in the dashboard\n"
    "  --run-lab           start the kernel lab's run loop (with its default or current settings)\n"
    "  --scale S           UI scale (default: the monitor's content scale, for HiDPI)\n"
    "  --size WxH          window size at scale 1 (default 1600x1000); the window is this times the scale\n"
    "  --threads N         CPU threads per forward pass (default: auto, load-aware)\n"
    "  --ctx N             KV cache size in tokens (default: the model's context length)\n"
    "  --weights FORMAT    on the GPU: auto (default: bf16 for a small model, else the blocks), quantized\n"
    "                      (the file's blocks) or bf16\n"
    "  --chat-template FILE  a Jinja chat template to use instead of the model's\n"
    "  --conversation FILE   open a saved conversation (the chat panel's Conversation file) at start\n"
    "  --models            open the model picker (installed models and their facts) at start\n"
    "  --layer L --head H  the layer and head whose attention the Attention tab shows after an answer\n"
    "headless (for tests and screenshots; run under xvfb-run without a display):\n"
    "  --frames N          render N frames and exit; with --prompt, until the answer ends or N frames\n"
    "  --screenshot PNG    write the last frame as a PNG (the window's size in pixels)\n"
    "  --layout JSON       write where each panel was drawn on the last frame\n"
    "  --prompt TEXT       send TEXT as the first message once the model has loaded\n"
    "  --max-tokens N      answer length limit (default 256)\n"
    "  --seed S            fixed sampling seed (default: a new one for every answer)\n"
    "  --greedy            temperature 0 (argmax)\n"
    "  --dry-multiplier D  DRY, the penalty that ends repetition loops, 0..100 (default 0.8; 0 disables)\n"
    "  --mouse X,Y         hold the pointer at X,Y (window pixels): hover tests\n"
    "  --switch-to PATH    once the model has loaded, switch to PATH as the model picker does;\n"
    "                      with --frames, until the switch succeeded or failed or N frames\n"
    "  --keys SCRIPT       once the model has loaded, type SCRIPT into the chat box in one burst, as\n"
    "                      if between two frames: text, <Enter>, <Esc>, <Tab>, <Backspace>, <Ctrl+Q>...\n";

namespace {

bool to_int(const char* s, long lo, long hi, long* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

bool parse_app_options(int argc, char** argv, AppOptions* out, std::string* error) {
  AppOptions o;
  bool frames_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      continue;
    }
    if (flag == "--greedy") {
      o.greedy = true;
      continue;
    }
    if (flag == "--models") {
      o.open_models = true;
      continue;
    }
    if (flag == "--run-lab") {
      o.run_lab = true;
      continue;
    }
    const bool takes_value = flag == "--model" || flag == "--frames" || flag == "--screenshot" || flag == "--layout" ||
                             flag == "--tab" || flag == "--prompt" || flag == "--max-tokens" || flag == "--seed" || flag == "--dry-multiplier" ||
                             flag == "--size" || flag == "--scale" || flag == "--threads" || flag == "--ctx" ||
                             flag == "--replay" || flag == "--chat-template" || flag == "--weights" ||
                             flag == "--switch-to" || flag == "--conversation" || flag == "--keys" ||
                             flag == "--layer" || flag == "--head" || flag == "--mouse";
    if (!takes_value) {
      *error = "unknown argument '" + flag + "'";
      return false;
    }
    if (i + 1 >= argc) {
      *error = flag + " needs a value";
      return false;
    }
    const char* value = argv[++i];
    long n = 0;
    auto bad = [&](const char* what) {
      *error = flag + ": " + what + ", not '" + value + "'";
      return false;
    };
    if (flag == "--model") {
      o.model_path = value;
    } else if (flag == "--chat-template") {
      o.chat_template = value;
    } else if (flag == "--conversation") {
      o.conversation = value;
    } else if (flag == "--frames") {
      if (!to_int(value, 1, 1000000, &n)) return bad("expected a frame count ≥ 1");
      o.frames = static_cast<int>(n);
      frames_given = true;
    } else if (flag == "--screenshot") {
      o.screenshot = value;
    } else if (flag == "--layout") {
      o.layout = value;
    } else if (flag == "--tab") {
      o.tab = value;
    } else if (flag == "--replay") {
      if (*value == '\0') return bad("expected a trace file");
      o.replay = value;
    } else if (flag == "--switch-to") {
      o.switch_to = value;
    } else if (flag == "--keys") {
      o.keys = value;
    } else if (flag == "--prompt") {
      o.prompt = value;
      o.has_prompt = true;
    } else if (flag == "--max-tokens") {
      if (!to_int(value, 1, 1 << 20, &n)) return bad("expected a token count ≥ 1");
      o.max_tokens = static_cast<int>(n);
    } else if (flag == "--dry-multiplier") {
      char* end = nullptr;
      const double d = std::strtod(value, &end);
      if (end == value || *end != '\0' || !(d >= 0.0 && d <= 100.0)) return bad("expected a number in [0, 100]");
      o.dry_multiplier = static_cast<float>(d);
    } else if (flag == "--seed") {
      char* end = nullptr;
      o.seed = std::strtoull(value, &end, 10);
      if (end == value || *end != '\0') return bad("expected an unsigned integer");
      o.has_seed = true;
    } else if (flag == "--size") {
      int w = 0, h = 0;
      char tail = 0;
      if (std::sscanf(value, "%dx%d%c", &w, &h, &tail) != 2 || w < 320 || h < 240 || w > 16384 || h > 16384) {
        return bad("expected WxH, at least 320x240");
      }
      o.width = w;
      o.height = h;
    } else if (flag == "--scale") {
      char* end = nullptr;
      const double s = std::strtod(value, &end);
      if (end == value || *end != '\0' || s < 0.5 || s > 4.0) return bad("expected a scale from 0.5 to 4");
      o.scale = static_cast<float>(s);
    } else if (flag == "--threads") {
      if (!to_int(value, 0, 1024, &n)) return bad("expected a thread count");
      o.threads = static_cast<int>(n);
    } else if (flag == "--weights") {
      if (!parse_weight_format(value, &o.weights)) return bad("expected auto, quantized or bf16");
    } else if (flag == "--mouse") {
      char tail = 0;
      if (std::sscanf(value, "%f,%f%c", &o.mouse_x, &o.mouse_y, &tail) != 2) return bad("expected X,Y in pixels");
      o.has_mouse = true;
    } else if (flag == "--layer" || flag == "--head") {
      if (!to_int(value, 0, 1 << 16, &n)) return bad("expected an index ≥ 0");
      (flag == "--layer" ? o.attention_layer : o.attention_head) = static_cast<int>(n);
    } else if (flag == "--ctx") {
      if (!to_int(value, 0, 1 << 24, &n)) return bad("expected a token count");
      o.context = static_cast<int>(n);
    }
  }
  if (!o.screenshot.empty() && !frames_given) o.frames = 5;
  *out = std::move(o);
  return true;
}

}  // namespace flashscope::app

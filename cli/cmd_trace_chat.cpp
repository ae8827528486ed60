// `flashscope-cli trace chat`: one chat turn of a model, then the model's own
// attention of one layer and head over it (capture_attention,
// flashscope/attention_capture.hpp) written as a trace labelled with the
// conversation's tokens, and every head of the layer summarised.
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/attention_capture.hpp"
#include "flashscope/device.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/trace.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli trace chat [-m MODEL] -p PROMPT [--layer L] [--head H] [-n N]\n"
    "                                 [--device cpu|cuda] [--weights auto|quantized|bf16] --out FILE\n"
    "Runs one chat turn (greedy, N tokens at most, default 32), then traces the attention of layer L\n"
    "(default 0), q-head H (default 0), over the real queries, keys and values of the prompt and the\n"
    "answer: the probed build of the attention the engine ran. The trace's rows and keys carry the\n"
    "conversation's tokens. Prints each head's entropy, first-token (attention sink), previous-token\n"
    "and, for a model with sliding windows, window mass.\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "flashscope-cli trace chat: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "flashscope-cli trace chat: %s\n", msg.c_str());
  return 1;
}

// A token's text for a terminal: control bytes escaped.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void print_summaries(const AttentionCapture& cap, int traced_head) {
  std::printf("layer %d%s: %d rows (positions %d..%d) over %d keys\n", cap.layer,
              cap.window > 0 ? (" (sliding window " + std::to_string(cap.window) + ")").c_str() : "", cap.rows,
              cap.first, cap.keys - 1, cap.keys);
  const bool window = !cap.all_heads.empty() && cap.all_heads[0].window_mass >= 0;
  std::printf("  head  entropy(nats)  first-token  previous-token  self%s\n", window ? "  in-window" : "");
  for (const HeadSummary& s : cap.all_heads) {
    std::printf("  %4d  %13.3f  %11.3f  %14.3f  %4.2f", s.head, s.entropy, s.first_token_mass, s.previous_token_mass,
                s.self_mass);
    if (window) std::printf("  %9.3f", s.window_mass);
    std::printf("%s\n", s.head == traced_head ? "  <- traced" : "");
  }
}

}  // namespace

int cmd_trace_chat(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "prompt", "layer", "head", "n-predict", "device", "weights", "out", "threads", "chat-template"},
            {"help"});
  if (args.has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::string prompt = args.get("prompt");
  const int layer = int(args.get_int_in("layer", 0, 0, 0x7fffffff));
  const int head = int(args.get_int_in("head", 0, 0, 0x7fffffff));
  const int n_predict = parse_n_predict(args, 32);
  const std::string device = args.get("device", "cpu");
  const std::string out = args.get("out");
  ModelOptions mo;
  mo.weights = parse_weights(args);
  mo.threads = parse_threads(args, "trace chat");
  if (!args.ok()) return usage_error(args.error());
  if (!args.positional().empty()) return usage_error("unexpected argument '" + args.positional()[0] + "'");
  if (prompt.empty()) return usage_error("-p PROMPT is required");
  if (out.empty()) return usage_error("--out FILE is required");
  if (device == "cpu") {
    mo.device = Device::kCpu;
  } else if (device == "cuda") {
    mo.device = Device::kCuda;
  } else {
    return usage_error("--device must be cpu or cuda");
  }
  const std::string path = resolve_model_path(args);
  if (path.empty()) return fail(missing_model_message("trace chat"));

  auto model = Model::load(path, mo);
  if (!model.ok()) return fail(model.status().to_string());
  const ModelConfig& c = model->config();
  if (layer >= c.n_layers)
    return usage_error("--layer " + std::to_string(layer) + ": the model has " + std::to_string(c.n_layers) + " layers");
  if (head >= c.n_heads)
    return usage_error("--head " + std::to_string(head) + ": the model has " + std::to_string(c.n_heads) +
                       " query heads");
  ChatFormat format;
  if (!chat_format_from_args(args, *model, "trace chat", &format)) return 1;

  auto session = Session::create(*model);
  if (!session.ok()) return fail(session.status().to_string());
  if (Status s = arm_attention_capture(*session, layer); !s.ok()) return fail(s.to_string());
  auto turn = format.next_turn(session->tokens(), {{"user", prompt}});
  if (!turn.ok()) return fail(turn.status().to_string());
  GenerateParams gp;
  gp.max_tokens = n_predict;
  gp.sampling.temperature = 0.0f;
  std::string answer;
  auto stats = session->generate(turn->keep, turn->feed, gp, [&](const TokenEvent& e) {
    answer.append(e.text);
    return true;
  });
  if (!stats.ok()) return fail(stats.status().to_string());

  AttentionCaptureRequest req;
  req.layer = layer;
  req.heads = {head};
  auto cap = capture_attention(*session, req);
  if (!cap.ok()) return fail(cap.status().to_string());
  Trace& t = cap->heads[0].trace;
  t.meta.producer = "flashscope-cli";
  if (Status s = write_trace(t, out); !s.ok()) return fail(s.to_string());

  std::printf("answer: %s\n", printable(answer).c_str());
  std::printf("%s: wrote the attention of layer %d, head %d (%s, kernel %s; format version %u, with tokens)\n",
              out.c_str(), layer, head, t.meta.backend.c_str(), t.meta.kernel.c_str(), kTraceFormatVersion);
  print_summaries(cap.value(), head);
  return 0;
}

}  // namespace flashscope::cli

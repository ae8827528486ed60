// flashscope-cli: the runtime from a terminal — device facts, benchmarks and
// a file-based attention call anyone can check from numpy or PyTorch.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"

namespace {

void print_usage() {
  std::printf(
      "flashscope-cli — FlashScope attention runtime\n\n"
      "usage: flashscope-cli <command> [options]\n\n"
      "commands:\n"
      "  info                 device, architecture, SMs, clocks and speed of light (SOL)\n"
      "  bench prefill        time the prefill kernels on a shape (median of many runs)\n"
      "  bench decode         time paged-KV decode on a batch of sequences (median of many runs)\n"
      "  bench e2e            the engine on a model: prompt tokens/s, time to first token, decode tokens/s at batch 1..N\n"
      "  bench capture        decode tokens/s with attention capture never armed, armed then disarmed, and armed\n"
      "  attend               attention on .npy files: q, k, v in, o (and lse) out\n"
      "  chat-template        render a conversation with the model's chat template (Jinja), or its token ids\n"
      "  chat                 talk with the model in the terminal (/reset, /system, /stats, /quit)\n"
      "  generate             run a GGUF model (default SmolLM2-135M) on a prompt, streaming the reply\n"
      "  serve                an OpenAI-compatible HTTP server (chat and completions, streaming; /metrics)\n"
      "  make-model           write a small llama GGUF with random weights of any shape and types\n"
      "  logits               every position's logits of a prompt as .npy (to compare with llama.cpp, transformers)\n"
      "  trace                capture a trace of one run to a file (prefill; decode later), or `trace info FILE`\n"
      "  help                 this text; `flashscope-cli <command> --help` for a command's options\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "info") return flashscope::cli::cmd_info(argc - 2, argv + 2);
  if (cmd == "bench") return flashscope::cli::cmd_bench(argc - 2, argv + 2);
  if (cmd == "attend") return flashscope::cli::cmd_attend(argc - 2, argv + 2);
  if (cmd == "chat") return flashscope::cli::cmd_chat(argc - 2, argv + 2);
  if (cmd == "generate") return flashscope::cli::cmd_generate(argc - 2, argv + 2);
  if (cmd == "trace") return flashscope::cli::cmd_trace(argc - 2, argv + 2);
  if (cmd == "chat-template") return flashscope::cli::cmd_chat_template(argc - 2, argv + 2);
  if (cmd == "logits") return flashscope::cli::cmd_logits(argc - 2, argv + 2);
  if (cmd == "serve") {
#ifdef FLASHSCOPE_HAVE_SERVER
    return flashscope::cli::cmd_serve(argc - 2, argv + 2);
#else
    std::fprintf(stderr, "flashscope-cli serve: this build has no server (install libcpp-httplib-dev and rebuild)\n");
    return 1;
#endif
  }
  if (cmd == "make-model") return flashscope::cli::cmd_make_model(argc - 2, argv + 2);
  std::fprintf(stderr, "flashscope-cli: unknown command '%s'\n\n", cmd.c_str());
  print_usage();
  return 2;
}

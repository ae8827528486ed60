// llama.cpp's decode step in CPU time, measured the way `flashscope-cli bench
// e2e --json` reports decode_cpu_ms_per_token: the process CPU time (every
// thread's) around the decode steps only, so neither the load nor the prompt
// has to be subtracted from a whole run (llama-bench reports wall time, which
// another program's load on a shared machine inflates). Model defaults as
// llama-bench takes them (its CPU weight repacking included); a prompt of
// PROMPT tokens, one unmeasured step, then GEN measured steps each feeding
// the previous step's argmax (greedy, as bench e2e's default sampling).
// Prints wall and CPU ms per token.
//
//   L=/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp; B=/work/peers/llama-build/bin
//   g++ -std=c++17 -O2 -I$L/include -I$L/ggml/include -o /tmp/lcdecode bench/llamacpp_decode_cpu.cpp \
//     -L$B -lllama -lggml -lggml-base -Wl,-rpath,$B
//   /tmp/lcdecode MODEL.gguf [threads=1] [prompt=8] [gen=64] [flash_attn=1]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu_seconds.hpp"
#include "llama.h"

static void quiet(ggml_log_level, const char*, void*) {}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [threads] [prompt] [gen] [flash_attn]\n", argv[0]);
    return 2;
  }
  const int threads = argc > 2 ? atoi(argv[2]) : 1;
  const int prompt = argc > 3 ? atoi(argv[3]) : 8;
  const int gen = argc > 4 ? atoi(argv[4]) : 64;
  const bool fa = argc > 5 ? atoi(argv[5]) != 0 : true;
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(prompt + gen + 16);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(prompt);
  cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = fa ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<llama_token> ids(static_cast<size_t>(prompt));
  for (int i = 0; i < prompt; ++i) ids[static_cast<size_t>(i)] = (i * 7919 + 13) % n_vocab;
  if (llama_decode(ctx, llama_batch_get_one(ids.data(), prompt)) != 0) return 1;
  auto argmax = [&]() {
    const float* l = llama_get_logits_ith(ctx, -1);
    llama_token best = 0;
    for (int v = 1; v < n_vocab; ++v)
      if (l[v] > l[best]) best = v;
    return best;
  };
  llama_token next = argmax();
  if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;  // unmeasured
  next = argmax();
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < gen; ++i) {
    if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
    next = argmax();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - c0;
  std::printf("{\"threads\":%d,\"prompt\":%d,\"gen\":%d,\"flash_attn\":%d,\"decode_ms_per_token\":%.3f,"
              "\"decode_cpu_ms_per_token\":%.3f}\n",
              threads, prompt, gen, fa ? 1 : 0, 1e3 * wall / gen, 1e3 * cpu / gen);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

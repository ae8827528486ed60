// Embedding FlashScope's LLM engine in a C++ program: load a model, hold one
// chat session, stream two replies, and cancel a third from another thread
// (what a UI's "stop" button does).
//
//   embed_chat [MODEL.gguf]     (default: the SmolLM2 file scripts/fetch_model.sh fetches)
//
// Sampling is what flashscope-cli and `serve` answer with (default_sampling:
// the library's defaults, DRY included, with the model's recommendation from
// its GGUF metadata or card on top) with a fixed seed, so a run is repeatable.
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <flashscope/engine.hpp>
#include <flashscope/model.hpp>

using namespace flashscope;

namespace {

// One turn: the user's message, the reply streamed to stdout as it is
// sampled, and the reply added to the conversation.
Result<GenerateStats> turn(Session& session, const ChatFormat& format, std::vector<ChatMessage>& messages,
                           const std::string& user, const GenerateParams& params, const TokenCallback& also = {}) {
  messages.push_back({"user", user});
  auto next = format.next_turn(session.tokens(), messages);
  if (!next.ok()) return next.status();
  std::printf("user: %s\nassistant: ", user.c_str());
  std::string reply;
  auto stats = session.generate(next->keep, next->feed, params, [&](const TokenEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);  // streamed: each piece as it comes
    reply.append(e.text);
    return also ? also(e) : true;
  });
  std::printf("\n");
  if (stats.ok()) messages.push_back({"assistant", reply});  // the session keeps even a cancelled reply
  return stats;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : find_default_model();
  if (path.empty()) {
    std::fprintf(stderr, "embed_chat: no model given and %s not found (run scripts/fetch_model.sh)\n",
                 kDefaultModelFile);
    return 1;
  }
  auto model = Model::load(path);  // the CPU; ModelOptions{Device::kCuda} for the GPU
  if (!model.ok()) {
    std::fprintf(stderr, "embed_chat: %s\n", model.status().to_string().c_str());
    return 1;
  }
  auto session = Session::create(*model);
  if (!session.ok()) {
    std::fprintf(stderr, "embed_chat: %s\n", session.status().to_string().c_str());
    return 1;
  }
  const ChatFormat format = ChatFormat::for_model(*model);
  std::vector<ChatMessage> messages;

  GenerateParams params;
  params.max_tokens = 48;
  params.sampling = default_sampling(model->sampling_defaults());
  params.sampling.seed = 42;
  const std::string source = model->sampling_defaults().source;
  std::printf("model: %s, %d layers; sampling: temperature %g, top-p %g (%s)\n",
              model->config().name.c_str(), model->config().n_layers, params.sampling.temperature,
              params.sampling.top_p, source.empty() ? "FlashScope's defaults" : source.c_str());

  const char* questions[] = {"What is the capital of France?", "What is it famous for?"};
  for (int i = 0; i < 2; ++i) {
    auto stats = turn(*session, format, messages, questions[i], params);
    if (!stats.ok()) {
      std::fprintf(stderr, "embed_chat: %s\n", stats.status().to_string().c_str());
      return 1;
    }
    std::printf("[turn %d: %d tokens streamed, stop: %s]\n", i + 1, stats->generated_tokens,
                stop_reason_name(stats->stop_reason));
  }

  // Cancel from another thread. The reply's first token waits until the
  // cancel is sent, so the run is the same every time; a real program's
  // UI thread calls cancel() whenever the user asks.
  std::atomic<int> tokens_seen{0};
  std::atomic<bool> sent{false}, finished{false};
  std::thread canceller([&] {
    while (tokens_seen.load() == 0 && !finished.load()) std::this_thread::yield();
    if (finished.load()) return;
    session->cancel();  // thread-safe, lock-free
    sent.store(true);
  });
  params.max_tokens = 200;
  auto stats = turn(*session, format, messages, "Tell me a long story about a dragon.", params,
                    [&](const TokenEvent& e) {
                      if (e.token >= 0 && tokens_seen.fetch_add(1) == 0) {
                        while (!sent.load()) std::this_thread::yield();
                      }
                      return true;
                    });
  finished.store(true);
  canceller.join();
  if (!stats.ok()) {
    std::fprintf(stderr, "embed_chat: %s\n", stats.status().to_string().c_str());
    return 1;
  }
  if (stats->stop_reason != StopReason::kCancelled) {
    std::printf("[turn 3: ended (%s) before the cancel came]\n", stop_reason_name(stats->stop_reason));
    return 1;
  }
  std::printf("[turn 3: cancelled from another thread after %d tokens; the session holds %d tokens]\n",
              stats->generated_tokens, session->n_tokens());
  return 0;
}

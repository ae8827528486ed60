// The model picker without a window: the catalog lists a folder's GGUF
// files with the facts their headers give (and a broken file with its
// error), and the engine worker switches models on its thread — a file that
// fails leaves the running model answering, one without a chat template
// runs as a question-and-answer transcript — while the chat's system prompt follows the model.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "chat/chat_actions.hpp"
#include "chat/engine_worker.hpp"
#include "chat/model_catalog.hpp"
#include "dashboard/metrics.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::ChatFormatKind;
using flashscope::app::CatalogEntry;
using flashscope::app::ChatPanelState;
using flashscope::app::EngineSnapshot;
using flashscope::app::EngineState;
using flashscope::app::EngineWorker;

namespace {

// A fresh folder under /tmp, removed with its files at the end of the test.
struct TempDir {
  std::string path;
  std::vector<std::string> files;
  TempDir() {
    char tmpl[] = "/tmp/flashscope-models-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    for (const std::string& f : files) std::remove(f.c_str());
    ::rmdir(path.c_str());
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string p = path + "/" + name;
    FILE* f = std::fopen(p.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
    files.push_back(p);
    return p;
  }
};

// A chat model (ChatML template) and a base model (no template), as files.
flashscope::testing::SyntheticLlama chat_spec() {
  flashscope::testing::SyntheticLlama s;
  s.context = 384;
  return s;
}
flashscope::testing::SyntheticLlama base_spec() {
  flashscope::testing::SyntheticLlama s;
  s.context = 256;
  s.seed = 7;
  s.skip_keys.insert("tokenizer.chat_template");
  return s;
}

template <typename Pred>
EngineSnapshot wait_for(const EngineWorker& worker, Pred done) {
  EngineSnapshot snap;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    worker.snapshot(&snap);
    if (done(snap)) return snap;
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, "the engine worker did not finish in 20 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

TEST_CASE("model catalog: a folder's GGUF files with their header facts; a broken file listed with its error") {
  TempDir dir;
  const std::string chat = dir.write("b-chat.gguf", chat_spec().build());
  const std::string base = dir.write("a-base.gguf", base_spec().build());
  dir.write("c-broken.gguf", {'G', 'G', 'U', 'F', 3, 0});
  dir.write("notes.txt", {'x'});

  const std::vector<CatalogEntry> models = flashscope::app::list_models({dir.path, dir.path + "/."});
  REQUIRE(models.size() == 3);  // sorted by name; the folder's second spelling adds nothing; not the .txt
  CHECK(models[0].facts.file_name == "a-base.gguf");
  CHECK(models[1].facts.file_name == "b-chat.gguf");
  CHECK(models[2].facts.file_name == "c-broken.gguf");
  CHECK_FALSE(models[2].error.empty());
  CHECK(models[0].error.empty());

  const auto& b = models[0].facts;
  const auto& c = models[1].facts;
  CHECK(c.architecture == "llama");
  CHECK(c.context_length == 384);
  CHECK(b.context_length == 256);
  CHECK(c.has_chat_template);
  CHECK_FALSE(b.has_chat_template);
  CHECK(c.tokenizer == "gpt2");
  CHECK(flashscope::app::tokenizer_kind_label(c.tokenizer) == "BPE (GPT-2 style)");
  CHECK(flashscope::app::tokenizer_kind_label("llama") == "SentencePiece");

  // Parameters and the weight-type shares, against the file's own tensors.
  auto file = flashscope::GgufFile::open(chat);
  REQUIRE(file.ok());
  int64_t params = 0, q4_1 = 0;
  for (const auto& t : file->tensors()) {
    params += t.n_elements();
    if (t.type == flashscope::GgmlType::kQ4_1) q4_1 += t.n_elements();
  }
  CHECK(c.parameters == params);
  CHECK(c.file_bytes == file->file_size());
  REQUIRE_FALSE(c.weight_types.empty());
  double sum = 0;
  for (const auto& [type, share] : c.weight_types) sum += share;
  CHECK(sum == doctest::Approx(1.0));
  CHECK(c.weight_types[0].first == flashscope::ggml_type_name(flashscope::GgmlType::kQ4_1));  // the matrices
  CHECK(c.weight_types[0].second == doctest::Approx(static_cast<double>(q4_1) / params));
  const std::string q4_1_name = flashscope::ggml_type_name(flashscope::GgmlType::kQ4_1);
  CHECK(flashscope::app::weight_types_label(c).rfind(q4_1_name + " ", 0) == 0);

  CHECK(flashscope::app::parameter_label(134'515'008) == "135M");
  CHECK(flashscope::app::parameter_label(1'230'000'000) == "1.2B");
  CHECK(flashscope::app::same_file(chat, dir.path + "/./b-chat.gguf"));
  CHECK_FALSE(flashscope::app::same_file(chat, base));
  CHECK_FALSE(flashscope::app::read_model_facts(dir.path + "/missing.gguf").ok());
}

TEST_CASE("engine worker: a model switch that fails keeps the old model; a base model runs as a question-and-answer transcript") {
  TempDir dir;
  const std::string chat = dir.write("chat-model.gguf", chat_spec().build());
  const std::string base = dir.write("base-model.gguf", base_spec().build());
  const std::string broken = dir.write("broken.gguf", {'G', 'G', 'U', 'F', 3, 0});

  EngineWorker worker;
  EngineWorker::Options o;
  o.model_path = chat;
  worker.start(o);
  EngineSnapshot s = wait_for(worker, [](const EngineSnapshot& x) { return x.state != EngineState::kLoading; });
  REQUIRE(s.state == EngineState::kIdle);
  CHECK(s.model_name == "chat-model");
  CHECK(s.chat_format == ChatFormatKind::kTemplate);
  const uint64_t first = s.model_generation;

  ChatPanelState chat_state;
  flashscope::app::Conversation conversation;
  flashscope::app::Metrics metrics;
  flashscope::app::sync_chat_with_engine(chat_state, conversation, s, metrics);
  const std::string chat_default = conversation.system_prompt;

  // A file the loader refuses: the error is reported, the chat model stays and answers.
  flashscope::app::switch_model(chat_state, worker, broken);
  worker.snapshot(&s);
  CHECK(s.switching_to == broken);  // at once, before the worker takes it up
  CHECK(worker.busy());
  s = wait_for(worker, [](const EngineSnapshot& x) { return x.switching_to.empty(); });
  CHECK(s.switch_error.find("cannot load " + broken) == 0);
  CHECK(s.state == EngineState::kIdle);
  CHECK(s.model_name == "chat-model");
  CHECK(s.model_generation == first);
  CHECK_FALSE(worker.busy());
  flashscope::GenerateParams gp;
  gp.max_tokens = 3;
  flashscope::app::EngineRequest r;
  r.id = chat_state.next_request_id++;
  r.messages = {{"user", "hi"}};
  r.params = gp;
  worker.submit(r);
  s = wait_for(worker, [&](const EngineSnapshot& x) { return x.answer_id == r.id && x.answer_done; });
  CHECK(s.answer_error.empty());
  CHECK(s.answer_tokens > 0);

  // The picker refuses a file that is not a model before the worker sees it.
  CHECK_FALSE(flashscope::app::pick_model(chat_state, worker, dir.path + "/missing.gguf"));
  CHECK(chat_state.picker.path_error.find(dir.path + "/missing.gguf") != std::string::npos);

  // The base model: loaded on the worker's thread, a transcript, the cache starts empty.
  REQUIRE(flashscope::app::pick_model(chat_state, worker, base));
  CHECK(chat_state.picker.path_error.empty());
  s = wait_for(worker, [](const EngineSnapshot& x) { return x.switching_to.empty(); });
  CHECK(s.switch_error.empty());
  CHECK(s.model_generation == first + 1);
  CHECK(s.model_name == "base-model");
  CHECK(s.model_path == base);
  CHECK(s.chat_format == ChatFormatKind::kTranscript);
  CHECK(s.chat_format_notice == "the model has no chat template: a question-and-answer transcript");
  CHECK(s.context_capacity == 256);
  CHECK(s.context_used == 0);
  REQUIRE(chat_state.picker.models.size() == 1);  // the typed file joins the picker's list
  CHECK(chat_state.picker.models[0].facts.file_name == "base-model.gguf");

  // The system prompt follows the model while it is the model's default...
  CHECK(chat_default == "You are a synthetic test model");  // the synthetic template's default
  flashscope::app::sync_chat_with_engine(chat_state, conversation, s, metrics);
  CHECK(conversation.system_prompt == flashscope::kSmolLMDefaultSystemPrompt);  // no template: the app's default
  REQUIRE(flashscope::app::pick_model(chat_state, worker, chat));
  s = wait_for(worker, [](const EngineSnapshot& x) { return x.switching_to.empty(); });
  CHECK(s.chat_format == ChatFormatKind::kTemplate);
  CHECK(s.model_generation == first + 2);
  flashscope::app::sync_chat_with_engine(chat_state, conversation, s, metrics);
  CHECK(conversation.system_prompt == chat_default);

  // ...and one the person wrote stays.
  conversation.system_prompt = "answer in French";
  REQUIRE(flashscope::app::pick_model(chat_state, worker, base));
  s = wait_for(worker, [](const EngineSnapshot& x) { return x.switching_to.empty(); });
  flashscope::app::sync_chat_with_engine(chat_state, conversation, s, metrics);
  CHECK(s.model_generation == first + 3);
  CHECK(conversation.system_prompt == "answer in French");
}

#include "chat/engine_worker.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "flashscope/device.hpp"

namespace flashscope::app {

const char* engine_state_name(EngineState s) {
  switch (s) {
    case EngineState::kLoading: return "loading model";
    case EngineState::kIdle: return "idle";
    case EngineState::kPrefilling: return "prefill";
    case EngineState::kGenerating: return "generating";
    case EngineState::kFailed: return "no model";
  }
  return "?";
}

EngineWorker::~EngineWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  cancel_through_.store(std::numeric_limits<uint64_t>::max());
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::start(const Options& options) {
  thread_ = std::thread(&EngineWorker::run, this, options.model_path, Model(), options.threads, options.context);
}

void EngineWorker::start(Model model, int context) {
  thread_ = std::thread(&EngineWorker::run, this, std::string(), std::move(model), 0, context);
}

void EngineWorker::submit(EngineRequest request) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    newest_submitted_ = std::max(newest_submitted_, request.id);
    queue_.push_back(std::move(request));
  }
  wake_.notify_one();
}

void EngineWorker::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Every request submitted so far: the running one stops at its next
  // token, queued ones are answered "stopped" as soon as they are popped, so
  // each request still gets exactly one finished answer in the snapshot.
  cancel_through_.store(newest_submitted_);
}

void EngineWorker::reset(uint64_t id) {
  stop();
  EngineRequest r;
  r.kind = EngineRequest::Kind::kReset;
  r.id = id;
  submit(std::move(r));
}

void EngineWorker::snapshot(EngineSnapshot* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  *out = snap_;
}

bool EngineWorker::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !queue_.empty() || snap_.state == EngineState::kPrefilling || snap_.state == EngineState::kGenerating;
}

void EngineWorker::run(std::string path, Model preloaded, int threads, int context) {
  Model model = std::move(preloaded);
  std::string error;
  if (!model.loaded()) {
    // The GPU when there is one; the CPU engine if the GPU load fails, so
    // the chat still works (the header says which engine runs).
    ModelOptions mo;
    mo.threads = threads;
    mo.device = cuda_available() ? Device::kCuda : Device::kCpu;
    auto loaded = Model::load(path, mo);
    if (!loaded.ok() && mo.device == Device::kCuda) {
      mo.device = Device::kCpu;
      loaded = Model::load(path, mo);
    }
    if (loaded.ok()) model = std::move(loaded).value();
    else error = "cannot load " + path + ": " + loaded.status().to_string();
  }
  if (model.loaded()) {
    SessionOptions so;
    so.max_tokens = context;
    auto session = Session::create(model, so);
    if (session.ok()) session_ = std::move(session).value();
    else error = "cannot create a session: " + session.status().to_string();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.model_path = path;
    if (error.empty()) {
      model_ = model;
      const ModelConfig& c = model_.config();
      snap_.config = c;
      // The file's name says more than general.name (which is often a
      // training-run tag): "SmolLM2-135M-Instruct.Q4_1".
      const size_t slash = path.find_last_of('/');
      std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
      if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".gguf") == 0) stem.resize(stem.size() - 5);
      snap_.model_name = !stem.empty() ? stem : !c.name.empty() ? c.name : c.architecture;
      snap_.on_gpu = model.device() == Device::kCuda;
      snap_.weight_bytes = model_.weight_bytes();
      // K and V, every layer, bf16.
      snap_.kv_bytes_per_token = static_cast<uint64_t>(c.n_layers) * c.n_kv_heads * c.head_dim * 2 * 2;
      snap_.default_system_prompt = default_system_prompt_from_template(model_.chat_template());
      snap_.context_capacity = session_.capacity();
      snap_.state = EngineState::kIdle;
    } else {
      snap_.load_error = error;
      snap_.state = EngineState::kFailed;
    }
  }

  while (true) {
    EngineRequest request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      request = std::move(queue_.front());
      queue_.pop_front();
      // Set under the same lock as the pop so busy() never sees a gap.
      if (request.kind == EngineRequest::Kind::kGenerate && snap_.state == EngineState::kIdle) {
        snap_.state = EngineState::kPrefilling;
      }
    }
    process(request);
  }
}

void EngineWorker::process(const EngineRequest& request) {
  if (request.kind == EngineRequest::Kind::kReset) {
    if (model_.loaded()) session_.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.context_used = 0;
    ++snap_.requests_done;
    return;
  }
  generate(request);
}

void EngineWorker::generate(const EngineRequest& r) {
  using Clock = std::chrono::steady_clock;
  auto finish = [&](std::string error, const GenerateStats* stats) {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.answer_done = true;
    snap_.answer_error = std::move(error);
    if (stats) snap_.stats = *stats;
    if (model_.loaded()) snap_.context_used = session_.n_tokens();
    if (snap_.state != EngineState::kFailed) snap_.state = EngineState::kIdle;
    ++snap_.requests_done;
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.answer_id = r.id;
    snap_.answer_text.clear();
    snap_.answer_done = false;
    snap_.answer_error.clear();
    snap_.answer_tokens = 0;
    snap_.answer_prompt_tokens = 0;
    snap_.answer_reused_tokens = 0;
    snap_.answer_live_tokens_per_s = 0.0;
    snap_.stats = GenerateStats();
  }
  if (!model_.loaded()) {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      why = snap_.load_error;
    }
    finish("no model: " + why, nullptr);
    return;
  }
  if (r.id <= cancel_through_.load()) {  // stopped before it started
    GenerateStats stopped;
    stopped.stop_reason = StopReason::kCallback;
    finish("", &stopped);
    return;
  }

  // Sync the cache with the conversation: keep the longest common prefix,
  // prefill the rest. At least one token must be fed to get logits.
  const std::vector<int32_t> ids = encode_chatml(model_.tokenizer(), r.messages, true, /*default_system=*/"");
  const int capacity = session_.capacity();
  if (static_cast<int>(ids.size()) >= capacity) {
    finish("the conversation is " + std::to_string(ids.size()) + " tokens and the context holds " +
               std::to_string(capacity) + ": start a new chat or shorten it",
           nullptr);
    return;
  }
  const std::vector<int32_t> cached = session_.tokens();
  size_t common = 0;
  while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
  if (common == ids.size()) --common;
  if (Status s = session_.truncate(static_cast<int>(common)); !s.ok()) {
    finish(s.to_string(), nullptr);
    return;
  }
  const std::vector<int32_t> feed(ids.begin() + static_cast<std::ptrdiff_t>(common), ids.end());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.answer_reused_tokens = static_cast<int>(common);
    snap_.answer_prompt_tokens = static_cast<int>(feed.size());
    snap_.context_used = static_cast<int>(common);
  }

  Clock::time_point first_token;
  int sampled = 0;
  auto on_token = [&](const TokenEvent& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (e.token >= 0) {
      if (sampled++ == 0) {
        first_token = Clock::now();
        snap_.state = EngineState::kGenerating;
      }
      const double s = std::chrono::duration<double>(Clock::now() - first_token).count();
      snap_.answer_live_tokens_per_s = s > 0 ? (sampled - 1) / s : 0.0;
      snap_.answer_tokens = sampled;
      snap_.context_used = static_cast<int>(ids.size()) + sampled - 1;
    }
    snap_.answer_text.append(e.text.data(), e.text.size());
    return r.id > cancel_through_.load();
  };
  auto result = session_.generate(feed, r.params, on_token);
  if (!result.ok()) {
    finish(result.status().to_string(), nullptr);
    return;
  }
  finish("", &result.value());
}

}  // namespace flashscope::app

#include "chat/engine_worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>

#include "flashscope/attention_capture.hpp"
#include "flashscope/untrusted.hpp"
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
  threads_ = options.threads;
  context_ = options.context;
  weights_ = options.weights;
  thread_ = std::thread(&EngineWorker::run, this, options.model_path, Model(), options.chat_template_path,
                        std::string());
}

void EngineWorker::start(Model model, int context, std::string chat_template) {
  context_ = context;
  thread_ = std::thread(&EngineWorker::run, this, std::string(), std::move(model), std::string(),
                        std::move(chat_template));
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

void EngineWorker::set_attention_target(int layer, int head) {
  if (layer == attention_layer_.load() && head == attention_head_.load()) return;
  attention_layer_.store(layer);
  attention_head_.store(head);
  // One queued capture at a time: it reads the target when it runs, so a
  // slider dragged across many heads captures the last one, once.
  if (attention_queued_.exchange(true)) return;
  EngineRequest r;
  r.kind = EngineRequest::Kind::kCaptureAttention;
  submit(std::move(r));
}

void EngineWorker::snapshot(EngineSnapshot* out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  *out = snap_;
}

bool EngineWorker::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !queue_.empty() || processing_ || snap_.state == EngineState::kPrefilling ||
         snap_.state == EngineState::kGenerating || !snap_.switching_to.empty();
}

void EngineWorker::load_model(uint64_t id, std::string path) {
  stop();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.switching_to = path;
    snap_.switch_error.clear();
  }
  EngineRequest r;
  r.kind = EngineRequest::Kind::kLoadModel;
  r.id = id;
  r.model_path = std::move(path);
  submit(std::move(r));
}

std::string EngineWorker::load(const std::string& path, Model preloaded, const std::string& template_path,
                               std::string template_text) {
  Model model = std::move(preloaded);
  if (!model.loaded()) {
    // The GPU when there is one; the CPU engine if the GPU load fails, so
    // the chat still works (the header says which engine runs).
    ModelOptions mo;
    mo.threads = threads_;
    mo.device = cuda_available() ? Device::kCuda : Device::kCpu;
    mo.weights = weights_;
    auto loaded = Model::load(path, mo);
    if (!loaded.ok() && mo.device == Device::kCuda) {
      mo.device = Device::kCpu;
      loaded = Model::load(path, mo);
    }
    if (!loaded.ok()) return "cannot load " + path + ": " + loaded.status().to_string();
    model = std::move(loaded).value();
  }
  SessionOptions so;
  // --ctx caps every model's cache, never above what a model was trained on.
  const int trained = model.config().context_length;
  so.max_tokens = context_ > 0 && trained > 0 ? std::min(context_, trained) : context_;
  auto session = Session::create(model, so);
  if (!session.ok()) return "cannot create a session: " + session.status().to_string();
  // Every layer's query rows are kept (H·D bf16 per token and layer), so the
  // dashboard can show any layer's attention after an answer.
  if (Status armed = arm_attention_capture(*session, -1); !armed.ok())
    return "cannot arm the attention capture: " + armed.to_string();
  std::string template_notice;
  if (!template_path.empty()) {
    auto text = read_small_file(template_path);
    if (text.ok()) template_text = std::move(text).value();
    if (!text.ok()) template_notice = "cannot read the chat template: " + text.status().message() + "; ";
    else if (template_text.empty()) template_notice = "the chat template " + template_path + " is empty; ";
  }
  ChatFormat format = ChatFormat::for_model(model, template_text);
  if (!template_notice.empty() && format.notice().empty()) template_notice += "using the model's";
  template_notice += format.notice();

  // Only now is the old model let go: a file that fails above leaves it running.
  session_ = std::move(session).value();
  format_ = std::move(format);
  model_ = model;
  std::lock_guard<std::mutex> lock(mutex_);
  snap_.model_path = path;
  const ModelConfig& c = model_.config();
  snap_.config = c;
  // The file's name says more than general.name (which is often a
  // training-run tag): "SmolLM2-135M-Instruct.Q4_1".
  const size_t slash = path.find_last_of('/');
  std::string stem = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".gguf") == 0) stem.resize(stem.size() - 5);
  snap_.model_name = !stem.empty() ? stem : !c.name.empty() ? c.name : c.architecture;
  snap_.on_gpu = model_.device() == Device::kCuda;
  snap_.weight_bytes = model_.weight_bytes();
  snap_.device_weight_bytes = model_.device_weight_bytes();
  snap_.weights = model_.weight_format();  // kAuto resolved
  // K and V, every layer, bf16.
  snap_.kv_bytes_per_token = static_cast<uint64_t>(c.n_layers) * c.n_kv_heads * c.head_dim * 2 * 2;
  snap_.default_system_prompt = default_system_prompt_from_template(
      format_.kind() == ChatFormatKind::kTemplate ? format_.template_source() : model_.chat_template());
  snap_.sampling = default_sampling(model_.sampling_defaults());
  snap_.chat_format = format_.kind();
  snap_.chat_format_notice = template_notice;
  snap_.chat_format_fallback = !format_.template_status().ok() || (!template_path.empty() && template_text.empty());
  snap_.context_capacity = session_.capacity();
  snap_.context_used = 0;
  snap_.attention_answer_first = -1;
  snap_.load_error.clear();
  snap_.state = EngineState::kIdle;
  ++snap_.model_generation;
  return "";
}

void EngineWorker::run(std::string path, Model preloaded, std::string template_path, std::string template_text) {
  std::string error = load(path, std::move(preloaded), template_path, std::move(template_text));
  if (!error.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.model_path = path;
    snap_.load_error = error;
    snap_.state = EngineState::kFailed;
  }

  while (true) {
    EngineRequest request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      request = std::move(queue_.front());
      queue_.pop_front();
      processing_ = true;
      // Set under the same lock as the pop so busy() never sees a gap.
      if (request.kind == EngineRequest::Kind::kGenerate && snap_.state == EngineState::kIdle) {
        snap_.state = EngineState::kPrefilling;
      }
    }
    process(request);
    // A reset, or the attention capture after an answer, runs with the state
    // idle: busy() counts the request until it is done.
    std::lock_guard<std::mutex> lock(mutex_);
    processing_ = false;
  }
}

void EngineWorker::process(const EngineRequest& request) {
  if (request.kind == EngineRequest::Kind::kLoadModel) {
    // The --chat-template override was meant for the first model; another
    // model runs with its own template (or plain completion).
    std::string error = load(request.model_path, Model(), std::string(), std::string());
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.switching_to.clear();
    if (!error.empty() && snap_.state == EngineState::kFailed) snap_.load_error = error;
    snap_.switch_error = std::move(error);
    ++snap_.requests_done;
    return;
  }
  if (request.kind == EngineRequest::Kind::kCaptureAttention) {
    attention_queued_.store(false);
    capture_attention();
    return;
  }
  if (request.kind == EngineRequest::Kind::kReset) {
    if (model_.loaded()) session_.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.attention_answer_first = -1;
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

  // Sync the cache with the conversation: keep what it holds of the new
  // rendering, prefill the rest (ChatFormat::next_turn).
  auto turn = format_.next_turn(session_.tokens(), r.messages);
  if (!turn.ok()) {
    finish(turn.status().to_string(), nullptr);
    return;
  }
  const int keep = turn->keep;
  const std::vector<int32_t>& feed = turn->feed;
  const int capacity = session_.capacity();
  const int total = keep + static_cast<int>(feed.size());
  if (total >= capacity) {
    finish("the conversation is " + std::to_string(total) + " tokens and the context holds " +
               std::to_string(capacity) + ": start a new chat or shorten it",
           nullptr);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.answer_reused_tokens = keep;
    snap_.answer_prompt_tokens = static_cast<int>(feed.size());
    snap_.context_used = keep;
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
      snap_.context_used = total + sampled - 1;
    }
    snap_.answer_text.append(e.text.data(), e.text.size());
    return r.id > cancel_through_.load();
  };
  GenerateParams params = r.params;
  for (std::string& s : format_.stop_strings()) params.stop_strings.push_back(std::move(s));  // a base model's transcript
  auto result = session_.generate(keep, feed, params, on_token);
  if (!result.ok()) {
    finish(result.status().to_string(), nullptr);
    return;
  }
  {
    // The prompt fills positions [keep, total); each token sampled after it
    // is fed by a decode step of its own, from position total on.
    std::lock_guard<std::mutex> lock(mutex_);
    snap_.attention_answer_first = total;
  }
  finish("", &result.value());
  capture_attention();
}

void EngineWorker::capture_attention() {
  if (!model_.loaded() || session_.n_tokens() < 2) return;  // nothing to attend to yet
  const ModelConfig& c = model_.config();
  AttentionCaptureRequest req;
  req.layer = std::clamp(attention_layer_.load(), 0, c.n_layers - 1);
  req.heads = {std::clamp(attention_head_.load(), 0, c.n_heads - 1)};
  auto cap = flashscope::capture_attention(session_, req);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!cap.ok()) {
    snap_.attention_error = cap.status().to_string();
    return;
  }
  HeadCapture& h = cap->heads[0];
  char note[256];
  std::snprintf(note, sizeof note,
                "the model's own attention: layer %d, head %d over the conversation's %d tokens "
                "(entropy %.2f nats, %.0f%% on the first token)",
                cap->layer, h.head, cap->keys, h.summary.entropy, 100.0 * h.summary.first_token_mass);
  snap_.attention_trace = std::make_shared<const Trace>(std::move(h.trace));
  snap_.attention_steps = std::make_shared<const std::vector<Trace>>(std::move(h.decode_steps));
  snap_.attention_heads = cap->all_heads;
  ++snap_.attention_serial;
  snap_.attention_note = note;
  snap_.attention_error.clear();
}

}  // namespace flashscope::app

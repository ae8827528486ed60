// RequestQueue (request_queue.hpp): a thread that owns a BatchGenerator and
// `parallel` sessions, fed through a mutex-guarded queue.
//
//   loop:  admit  queued requests into free sessions (cancelled ones end here)
//          step   one BatchGenerator::step() with the lock released
//          reap   finished replies: on_done, release, the session reset and free
//
// Callbacks run with the lock released, so a callback may submit or cancel.
// cancel() of a running request uses Session::cancel(), the one call that is
// safe from another thread while step() runs.
#include "flashscope/request_queue.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "engine/reply.hpp"
#include "util/math.hpp"

namespace flashscope {

namespace {

struct Pending {
  uint64_t id = 0;
  std::vector<int32_t> prompt;
  GenerateParams params;
  TokenCallback on_token;
  DoneCallback on_done;
  bool cancelled = false;
};

struct Slot {
  Session session;
  bool busy = false;
  uint64_t id = 0;      // the request it runs
  int batch_id = -1;    // its reply in the BatchGenerator
  DoneCallback on_done;
};

constexpr int kPageTokens = 64;

}  // namespace

struct RequestQueue::Impl {
  Model model;
  RequestQueueOptions options;
  int session_tokens = 0;
  std::vector<Slot> slots;
  BatchGenerator batch;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> queue;
  bool stopping = false;
  uint64_t next_id = 1;
  RequestQueueStats counts;
  std::vector<int> slot_tokens;  // n_tokens of each session, as of the last step (read by stats())
  std::thread thread;

  void run();
  // Moves queued requests into free sessions; returns the requests that
  // ended before they started (cancelled, or refused by add()).
  std::vector<std::pair<DoneCallback, Result<GenerateStats>>> admit();
};

std::vector<std::pair<DoneCallback, Result<GenerateStats>>> RequestQueue::Impl::admit() {
  std::vector<std::pair<DoneCallback, Result<GenerateStats>>> ended;
  for (Slot& slot : slots) {
    if (queue.empty()) break;
    if (slot.busy) continue;
    Pending p = std::move(queue.front());
    queue.pop_front();
    if (p.cancelled) {
      GenerateStats st;
      st.stop_reason = StopReason::kCancelled;
      ++counts.completed;
      ++counts.cancelled;
      ended.emplace_back(std::move(p.on_done), st);
      continue;
    }
    slot.session.reset();
    auto id = batch.add(slot.session, p.prompt, p.params, std::move(p.on_token));
    if (!id.ok()) {
      ++counts.completed;
      ++counts.failed;
      ended.emplace_back(std::move(p.on_done), id.status());
      continue;
    }
    slot.busy = true;
    slot.id = p.id;
    slot.batch_id = id.value();
    slot.on_done = std::move(p.on_done);
  }
  return ended;
}

void RequestQueue::Impl::run() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    auto ended = admit();
    if (!ended.empty()) {
      lock.unlock();
      for (auto& [done, result] : ended) {
        if (done) done(result);
      }
      lock.lock();
      continue;  // sessions may have been left free: admit again
    }
    if (batch.done()) {
      if (stopping) return;
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      continue;
    }
    lock.unlock();
    (void)batch.step();  // a failed step finishes its replies with the error: reaped below
    lock.lock();
    ++counts.steps;
    std::vector<std::pair<DoneCallback, Result<GenerateStats>>> done;
    for (size_t i = 0; i < slots.size(); ++i) {
      Slot& slot = slots[i];
      if (slot.busy && batch.finished(slot.batch_id)) {
        Result<GenerateStats> r = batch.result(slot.batch_id);
        (void)batch.release(slot.batch_id);
        ++counts.completed;
        if (!r.ok()) {
          ++counts.failed;
        } else {
          counts.prompt_tokens += r.value().prompt_tokens;
          counts.generated_tokens += r.value().generated_tokens;
          if (r.value().stop_reason == StopReason::kCancelled) ++counts.cancelled;
        }
        done.emplace_back(std::move(slot.on_done), std::move(r));
        slot.session.reset();
        slot.busy = false;
        slot.on_done = nullptr;
      }
      slot_tokens[i] = slot.session.n_tokens();
    }
    if (!done.empty()) {
      lock.unlock();
      for (auto& [cb, result] : done) {
        if (cb) cb(result);
      }
      lock.lock();
    }
  }
}

RequestQueue::RequestQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<RequestQueue>> RequestQueue::create(const Model& model, const RequestQueueOptions& options) {
  if (!model.loaded()) return invalid_argument("RequestQueue: the model is not loaded");
  if (options.parallel < 1) return invalid_argument("RequestQueue: parallel must be >= 1");
  if (options.max_queued < 0) return invalid_argument("RequestQueue: max_queued must be >= 0");
  const int ctx = model.config().context_length;
  if (options.session_tokens < 0 || options.session_tokens > ctx) {
    return invalid_argument("RequestQueue: session_tokens must be in [0, " + std::to_string(ctx) +
                            "] (the model's context length)");
  }
  std::unique_ptr<Impl> impl;
  try {
    impl = std::make_unique<Impl>();
    impl->model = model;
    impl->options = options;
    impl->session_tokens = options.session_tokens > 0 ? options.session_tokens : ctx;
    impl->slots.resize(static_cast<size_t>(options.parallel));
    impl->slot_tokens.assign(static_cast<size_t>(options.parallel), 0);
    for (Slot& slot : impl->slots) {
      SessionOptions so;
      so.max_tokens = impl->session_tokens;
      auto s = Session::create(model, so);
      if (!s.ok()) return s.status();
      slot.session = std::move(s).value();
    }
    impl->counts.parallel = options.parallel;
    impl->thread = std::thread([p = impl.get()] { p->run(); });
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "RequestQueue: cannot allocate the sessions");
  } catch (const std::system_error& e) {
    return Status(StatusCode::kOutOfMemory, std::string("RequestQueue: cannot start its thread: ") + e.what());
  }
  return std::unique_ptr<RequestQueue>(new RequestQueue(std::move(impl)));
}

RequestQueue::~RequestQueue() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (Pending& p : impl_->queue) p.cancelled = true;
    for (Slot& slot : impl_->slots) {
      if (slot.busy) slot.session.cancel();
    }
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<uint64_t> RequestQueue::submit(std::vector<int32_t> prompt_tokens, const GenerateParams& params,
                                      TokenCallback on_token, DoneCallback on_done) {
  Impl& q = *impl_;
  if (prompt_tokens.empty()) return invalid_argument("RequestQueue::submit: the prompt is empty");
  if (static_cast<int64_t>(prompt_tokens.size()) >= q.session_tokens) {
    return invalid_argument("RequestQueue::submit: the prompt has " + std::to_string(prompt_tokens.size()) +
                            " tokens; a session holds " + std::to_string(q.session_tokens) +
                            " (prompt and reply)");
  }
  const int vocab = q.model.config().vocab;
  for (int32_t t : prompt_tokens) {
    if (t < 0 || t >= vocab) {
      return invalid_argument("RequestQueue::submit: token " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
    }
  }
  FLASHSCOPE_RETURN_IF_ERROR(model::check_generate_params(params));
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.stopping) return invalid_argument("RequestQueue::submit: the queue is shutting down");
    int free_slots = 0;
    for (const Slot& s : q.slots) free_slots += !s.busy;
    const int waiting = static_cast<int>(q.queue.size());
    if (waiting - free_slots >= q.options.max_queued) {
      ++q.counts.rejected;
      return Status(StatusCode::kOutOfMemory, "RequestQueue::submit: the queue is full (" +
                                                  std::to_string(q.options.max_queued) + " requests wait)");
    }
    try {
      Pending p;
      p.id = q.next_id;
      p.prompt = std::move(prompt_tokens);
      p.params = params;
      p.on_token = std::move(on_token);
      p.on_done = std::move(on_done);
      q.queue.push_back(std::move(p));
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kOutOfMemory, "RequestQueue::submit: cannot allocate the request");
    }
    id = q.next_id++;
    ++q.counts.submitted;
  }
  q.cv.notify_all();
  return id;
}

bool RequestQueue::cancel(uint64_t id) {
  Impl& q = *impl_;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    for (Slot& slot : q.slots) {
      if (slot.busy && slot.id == id) {
        slot.session.cancel();
        return true;
      }
    }
    bool found = false;
    for (Pending& p : q.queue) {
      if (p.id == id && !p.cancelled) {
        p.cancelled = true;
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  q.cv.notify_all();
  return true;
}

RequestQueueStats RequestQueue::stats() const {
  const Impl& q = *impl_;
  std::lock_guard<std::mutex> lock(q.mu);
  RequestQueueStats s = q.counts;
  s.queued = 0;
  for (const Pending& p : q.queue) s.queued += !p.cancelled;
  s.running = 0;
  for (size_t i = 0; i < q.slots.size(); ++i) {
    s.running += q.slots[i].busy;
    s.kv_tokens += q.slot_tokens[i];
    s.kv_pages += ceil_div(q.slot_tokens[i], kPageTokens);
  }
  return s;
}

int RequestQueue::session_tokens() const { return impl_->session_tokens; }

const Model& RequestQueue::model() const { return impl_->model; }

}  // namespace flashscope

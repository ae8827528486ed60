// RequestQueue (flashscope/request_queue.hpp) and the BatchGenerator calls
// it rests on (cancel, release), on a synthetic model (always runs):
//
//  * requests submitted from several threads, more than the sessions, each
//    get the reply Session::generate gives alone (greedy and sampled);
//  * cancel: a waiting request never starts, a running one stops; on_done
//    once each, with kCancelled; the sessions come back empty;
//  * a full queue refuses with kOutOfMemory, malformed requests with
//    kInvalidArgument, and neither calls a callback;
//  * BatchGenerator::release frees a finished reply, keeps ids fixed, and
//    refuses a running one; cancel(id) stops that reply only.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/request_queue.hpp"
#include "flashscope/synthetic_model.hpp"

using namespace flashscope;

namespace {

Model synthetic_model() {
  SyntheticModelSpec spec;
  spec.context = 256;
  auto bytes = build_synthetic_model(spec);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().to_string());
  auto file = GgufFile::from_buffer(std::move(bytes).value());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

std::vector<int32_t> prompt(int n, int first) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + (first + 7 * i) % 90);
  return v;
}

struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> tokens;
  std::string text;
  int done_calls = 0;
  Result<GenerateStats> result = Status();

  TokenCallback on_token() {
    return [this](const TokenEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (e.token >= 0) tokens.push_back(e.token);
      text += std::string(e.text);
      return true;
    };
  }
  DoneCallback on_done() {
    return [this](const Result<GenerateStats>& r) {
      std::lock_guard<std::mutex> lock(mu);
      ++done_calls;
      result = r;
      cv.notify_all();
    };
  }
  bool wait(double seconds = 60) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_calls > 0; });
  }
};

std::vector<int32_t> alone(const Model& m, const std::vector<int32_t>& p, const GenerateParams& gp) {
  auto s = Session::create(m);
  REQUIRE(s.ok());
  std::vector<int32_t> out;
  auto r = s->generate(p, gp, [&](const TokenEvent& e) {
    if (e.token >= 0) out.push_back(e.token);
    return true;
  });
  REQUIRE(r.ok());
  return out;
}

bool wait_until(const std::function<bool()>& pred, double seconds = 30) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!pred()) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace

TEST_CASE("RequestQueue: requests from many threads each get the reply Session::generate gives alone") {
  const Model model = synthetic_model();
  RequestQueueOptions o;
  o.parallel = 3;
  o.max_queued = 16;
  auto q = RequestQueue::create(model, o);
  REQUIRE_MESSAGE(q.ok(), q.status().to_string());
  constexpr int kRequests = 12;
  std::vector<Outcome> outcomes(kRequests);
  std::vector<GenerateParams> params(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    params[i].max_tokens = 4 + i % 5;
    params[i].stop_tokens = {-1};  // only max_tokens ends them: replies of different lengths
    if (i % 2) {
      params[i].sampling.temperature = 0.9f;
      params[i].sampling.seed = 77 + static_cast<uint64_t>(i);
    }
    threads.emplace_back([&, i] {
      auto id = (*q)->submit(prompt(5 + i, i), params[i], outcomes[i].on_token(), outcomes[i].on_done());
      CHECK(id.ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    CAPTURE(i);
    REQUIRE(outcomes[i].wait());
    CHECK(outcomes[i].done_calls == 1);
    REQUIRE(outcomes[i].result.ok());
    CHECK(outcomes[i].result->stop_reason == StopReason::kMaxTokens);
    CHECK(outcomes[i].tokens == alone(model, prompt(5 + i, i), params[i]));
  }
  REQUIRE(wait_until([&] { return (*q)->stats().completed == kRequests; }));
  const RequestQueueStats st = (*q)->stats();
  CHECK(st.submitted == kRequests);
  CHECK(st.running == 0);
  CHECK(st.queued == 0);
  CHECK(st.kv_tokens == 0);
  CHECK(st.steps < st.generated_tokens);  // decoded together
}

TEST_CASE("RequestQueue: cancel stops a waiting request before it starts and a running one mid-reply") {
  const Model model = synthetic_model();
  RequestQueueOptions o;
  o.parallel = 1;
  o.max_queued = 4;
  auto q = RequestQueue::create(model, o);
  REQUIRE(q.ok());
  GenerateParams gp;
  gp.max_tokens = 200;
  gp.stop_tokens = {-1};
  std::atomic<int> seen{0};
  Outcome running, waiting;
  TokenCallback count = [&](const TokenEvent&) {
    ++seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // keep it running while the test acts
    return true;
  };
  auto a = (*q)->submit(prompt(8, 1), gp, count, running.on_done());
  auto b = (*q)->submit(prompt(8, 2), gp, waiting.on_token(), waiting.on_done());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*b == *a + 1);
  REQUIRE(wait_until([&] { return seen.load() > 2; }));
  CHECK((*q)->stats().queued == 1);
  CHECK((*q)->cancel(*b));
  CHECK((*q)->cancel(*a));
  REQUIRE(running.wait());
  REQUIRE(waiting.wait());
  REQUIRE(running.result.ok());
  CHECK(running.result->stop_reason == StopReason::kCancelled);
  CHECK(running.result->generated_tokens < 200);
  REQUIRE(waiting.result.ok());
  CHECK(waiting.result->stop_reason == StopReason::kCancelled);
  CHECK(waiting.tokens.empty());
  CHECK_FALSE((*q)->cancel(*a));  // ended: nothing to cancel
  CHECK_FALSE((*q)->cancel(9999));
  REQUIRE(wait_until([&] { return (*q)->stats().completed == 2; }));
  const RequestQueueStats st = (*q)->stats();
  CHECK(st.cancelled == 2);
  CHECK(st.kv_tokens == 0);
  CHECK(st.kv_pages == 0);
  // The session serves the next request.
  Outcome next;
  gp.max_tokens = 3;
  REQUIRE((*q)->submit(prompt(4, 3), gp, next.on_token(), next.on_done()).ok());
  REQUIRE(next.wait());
  CHECK(next.tokens == alone(model, prompt(4, 3), gp));
  CHECK(running.done_calls == 1);
  CHECK(waiting.done_calls == 1);
}

TEST_CASE("RequestQueue: a full queue and malformed requests are refused without a callback") {
  const Model model = synthetic_model();
  auto bad = RequestQueue::create(model, RequestQueueOptions{0, 1, 0});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  bad = RequestQueue::create(model, RequestQueueOptions{1, -1, 0});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  bad = RequestQueue::create(model, RequestQueueOptions{1, 1, 100000});
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK(RequestQueue::create(Model(), {}).status().code() == StatusCode::kInvalidArgument);

  RequestQueueOptions o;
  o.parallel = 1;
  o.max_queued = 1;
  o.session_tokens = 64;
  auto q = RequestQueue::create(model, o);
  REQUIRE(q.ok());
  CHECK((*q)->session_tokens() == 64);
  std::atomic<int> calls{0};
  TokenCallback tok = [&](const TokenEvent&) {
    ++calls;
    return true;
  };
  DoneCallback done = [&](const Result<GenerateStats>&) { ++calls; };
  GenerateParams gp;
  gp.max_tokens = 4;
  CHECK((*q)->submit({}, gp, tok, done).status().code() == StatusCode::kInvalidArgument);
  CHECK((*q)->submit(prompt(64, 0), gp, tok, done).status().code() == StatusCode::kInvalidArgument);  // no room
  CHECK((*q)->submit({5, 100}, gp, tok, done).status().code() == StatusCode::kInvalidArgument);      // vocab is 100
  GenerateParams bad_p = gp;
  bad_p.sampling.top_p = 0;
  CHECK((*q)->submit(prompt(4, 0), bad_p, tok, done).status().code() == StatusCode::kInvalidArgument);
  CHECK(calls.load() == 0);

  // One runs (held in its callback), one waits: the third is refused.
  std::mutex gate;
  gate.lock();
  std::atomic<bool> started{false};
  Outcome first, second;
  GenerateParams held = gp;
  held.stop_tokens = {-1};
  auto r1 = (*q)->submit(prompt(4, 1), held, [&](const TokenEvent&) {
    started = true;
    std::lock_guard<std::mutex> wait(gate);
    return true;
  }, first.on_done());
  REQUIRE(r1.ok());
  REQUIRE(wait_until([&] { return started.load(); }));
  REQUIRE((*q)->submit(prompt(4, 2), held, nullptr, second.on_done()).ok());
  auto full = (*q)->submit(prompt(4, 3), held, tok, done);
  CHECK(full.status().code() == StatusCode::kOutOfMemory);
  CHECK((*q)->stats().rejected == 1);
  gate.unlock();
  REQUIRE(first.wait());
  REQUIRE(second.wait());
  CHECK(calls.load() == 0);
}

TEST_CASE("BatchGenerator: release frees finished replies with ids kept, and cancel(id) stops that reply only") {
  const Model model = synthetic_model();
  auto s0 = Session::create(model);
  auto s1 = Session::create(model);
  REQUIRE(s0.ok());
  REQUIRE(s1.ok());
  GenerateParams shortp, longp;
  shortp.max_tokens = 2;
  shortp.stop_tokens = {-1};
  longp.max_tokens = 50;
  longp.stop_tokens = {-1};
  BatchGenerator batch;
  auto a = batch.add(*s0, prompt(4, 0), shortp, nullptr);
  auto b = batch.add(*s1, prompt(4, 1), longp, nullptr);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK_FALSE(batch.release(*b));  // still running
  while (!batch.finished(*a)) REQUIRE(batch.step().ok());
  CHECK(batch.result(*a).ok());
  CHECK(batch.release(*a));
  CHECK_FALSE(batch.release(*a));  // already released
  CHECK(batch.finished(*a));
  CHECK(batch.result(*a).status().code() == StatusCode::kInvalidArgument);
  CHECK_FALSE(batch.cancel(*a));
  // A new reply gets the next id, and b goes on.
  s0->reset();
  auto c = batch.add(*s0, prompt(4, 2), longp, nullptr);
  REQUIRE(c.ok());
  CHECK(*c == 2);
  CHECK(batch.size() == 3);
  REQUIRE(batch.step().ok());
  CHECK(batch.cancel(*b));
  while (!batch.finished(*b)) REQUIRE(batch.step().ok());
  REQUIRE(batch.result(*b).ok());
  CHECK(batch.result(*b)->stop_reason == StopReason::kCancelled);
  CHECK_FALSE(batch.finished(*c));  // the other reply was not touched
  while (!batch.done()) REQUIRE(batch.step().ok());
  REQUIRE(batch.result(*c).ok());
  CHECK(batch.result(*c)->stop_reason == StopReason::kMaxTokens);
  CHECK(batch.result(*c)->generated_tokens == 50);
  CHECK(batch.release(*b));
  CHECK(batch.release(*c));
  CHECK(batch.running() == 0);
}

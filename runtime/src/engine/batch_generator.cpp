// BatchGenerator and generate_batch (engine.hpp): many sessions' replies,
// each a model::Reply (the rules of Session::generate), advanced together.
//
//   add()   Reply::begin (checks; nothing runs)              → queued
//   step()  queued:  prefill (one forward each), sample, accept → running or finished
//           running: one decode_batch_and_sample over all of them (one forward
//                    pass with M = running replies, sampling where the model is),
//                    then each reply decoded() and accept(next) → running or finished
//
// Replies are kept by pointer and visited by index, so a callback that adds a
// reply (to this generator) does not disturb the step in progress: the new
// reply is queued for the next step. A released reply leaves a null entry;
// the leading nulls are dropped outside step() (`base` counts them), so ids
// stay fixed while the list holds only the replies in flight.
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/engine.hpp"
#include "model/internal.hpp"
#include "engine/next_token.hpp"
#include "engine/reply.hpp"

namespace flashscope {

namespace {

enum class Phase : uint8_t { kQueued, kRunning, kFinished };

struct Entry {
  std::unique_ptr<model::Reply> reply;
  Phase phase = Phase::kQueued;
  Result<GenerateStats> result = invalid_argument("the reply is still running");
};

}  // namespace

struct BatchGenerator::Impl {
  const Model::Impl* model = nullptr;  // of the first reply added; every reply runs on it
  std::deque<std::unique_ptr<Entry>> entries;  // entries[i] is reply base + i; null once released
  int base = 0;
  bool in_step = false;

  std::vector<float> host_logits;  // CPU models: the batch's logits

  void finish(Entry& e, Result<GenerateStats> result) {
    e.phase = Phase::kFinished;
    e.result = std::move(result);
  }
  void finish(Entry& e) { finish(e, e.reply->finish()); }

  Entry* find(int id) const {
    if (id < base || id - base >= static_cast<int>(entries.size())) return nullptr;
    return entries[static_cast<size_t>(id - base)].get();
  }
  void drop_released() {
    while (!entries.empty() && !entries.front()) {
      entries.pop_front();
      ++base;
    }
  }

  // After a reply's logits are ready (prefill, or a decode step it joined
  // with `next` sampled for it): the loop up to the next forward pass.
  void advance(Entry& e, const int32_t* next) {
    model::Reply& r = *e.reply;
    if (!r.wants_token()) return finish(e);
    int32_t id = -1;
    if (next != nullptr) {
      id = *next;
    } else {
      auto sampled = r.sample();
      if (!sampled.ok()) return finish(e, sampled.status());
      id = sampled.value();
    }
    if (!r.accept(id)) return finish(e);
    e.phase = Phase::kRunning;
  }
};

BatchGenerator::BatchGenerator() : impl_(std::make_unique<Impl>()) {}
BatchGenerator::~BatchGenerator() = default;
BatchGenerator::BatchGenerator(BatchGenerator&&) noexcept = default;
BatchGenerator& BatchGenerator::operator=(BatchGenerator&&) noexcept = default;

Result<int> BatchGenerator::add(Session& session, const std::vector<int32_t>& prompt_tokens,
                                const GenerateParams& params, TokenCallback on_token) {
  if (!impl_) return invalid_argument("BatchGenerator::add: the generator was moved from");
  if (!session.model().loaded()) return invalid_argument("BatchGenerator::add: the session has no model");
  const Model::Impl* m = model::Internal::impl(session.model());
  if (impl_->model != nullptr && impl_->model != m) {
    return invalid_argument("BatchGenerator::add: the session runs another model than the replies already added");
  }
  for (const auto& e : impl_->entries) {
    if (e && e->phase != Phase::kFinished && &e->reply->session() == &session) {
      return invalid_argument("BatchGenerator::add: the session already has a reply running in this batch");
    }
  }
  auto entry = std::unique_ptr<Entry>(new (std::nothrow) Entry());
  if (!entry) return Status(StatusCode::kOutOfMemory, "BatchGenerator::add: cannot allocate the reply");
  try {
    entry->reply = std::make_unique<model::Reply>(session, params, std::move(on_token));
    FLASHSCOPE_RETURN_IF_ERROR(entry->reply->begin(prompt_tokens));
    impl_->entries.push_back(std::move(entry));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "BatchGenerator::add: cannot allocate the reply");
  }
  impl_->model = m;
  return impl_->base + static_cast<int>(impl_->entries.size()) - 1;
}

Status BatchGenerator::step() {
  if (!impl_) return invalid_argument("BatchGenerator::step: the generator was moved from");
  Impl& g = *impl_;
  struct InStep {
    Impl& g;
    explicit InStep(Impl& impl) : g(impl) { g.in_step = true; }
    ~InStep() {
      g.in_step = false;
      g.drop_released();
    }
  } in_step(g);
  const size_t count = g.entries.size();  // replies a callback adds now wait for the next step
  for (size_t i = 0; i < count; ++i) {
    if (!g.entries[i]) continue;
    Entry& e = *g.entries[i];
    if (e.phase != Phase::kQueued) continue;
    const Status prefilled = e.reply->prefill();
    if (!prefilled.ok()) {
      g.finish(e, prefilled);  // the session is as it was
      continue;
    }
    g.advance(e, nullptr);
  }

  std::vector<Entry*> live;
  std::vector<Sequence*> seqs;
  std::vector<int32_t> tokens, next;
  std::vector<model::SampleInput> sampling;
  try {
    for (size_t i = 0; i < count; ++i) {
      if (!g.entries[i]) continue;
      Entry& e = *g.entries[i];
      if (e.phase != Phase::kRunning) continue;
      live.push_back(&e);
      seqs.push_back(&model::Internal::sequence(e.reply->session()));
      tokens.push_back(e.reply->token());
      sampling.push_back(e.reply->sample_input());
    }
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "BatchGenerator::step: cannot allocate the batch");
  }
  if (live.empty()) return Status::ok_status();

  const Model& model = live.front()->reply->session().model();
  bool forwarded = false;
  const Status stepped =
      model::decode_batch_and_sample(model, seqs, tokens, sampling, &next, &g.host_logits, &forwarded);
  if (!stepped.ok()) {
    // Every reply of the step ends with its error; each session keeps what
    // it generated (the token fed, or still pending when the forward failed).
    for (Entry* e : live) {
      if (forwarded) e->reply->decoded();
      g.finish(*e, stepped);
    }
    return stepped;
  }
  for (size_t i = 0; i < live.size(); ++i) {
    live[i]->reply->decoded();
    g.advance(*live[i], &next[i]);
  }
  return Status::ok_status();
}

bool BatchGenerator::done() const { return running() == 0; }

int BatchGenerator::running() const {
  if (!impl_) return 0;
  int n = 0;
  for (const auto& e : impl_->entries) n += e && e->phase != Phase::kFinished;
  return n;
}

int BatchGenerator::size() const { return impl_ ? impl_->base + static_cast<int>(impl_->entries.size()) : 0; }

bool BatchGenerator::finished(int id) const {
  if (!impl_ || id < 0 || id >= size()) return false;
  const Entry* e = impl_->find(id);
  return e == nullptr || e->phase == Phase::kFinished;  // null: released, which only a finished reply is
}

Result<GenerateStats> BatchGenerator::result(int id) const {
  const Entry* e = impl_ ? impl_->find(id) : nullptr;
  if (e == nullptr) {
    return invalid_argument("BatchGenerator::result: no reply has id " + std::to_string(id) +
                            (impl_ && id >= 0 && id < size() ? " (released)" : ""));
  }
  return e->result;
}

bool BatchGenerator::cancel(int id) {
  Entry* e = impl_ ? impl_->find(id) : nullptr;
  if (e == nullptr || e->phase == Phase::kFinished) return false;
  e->reply->session().cancel();
  return true;
}

bool BatchGenerator::release(int id) {
  Entry* e = impl_ ? impl_->find(id) : nullptr;
  if (e == nullptr || e->phase != Phase::kFinished) return false;
  impl_->entries[static_cast<size_t>(id - impl_->base)].reset();
  if (!impl_->in_step) impl_->drop_released();
  return true;
}

Result<std::vector<Result<GenerateStats>>> generate_batch(const std::vector<BatchRequest>& requests) {
  if (requests.empty()) return invalid_argument("generate_batch: no requests");
  for (size_t i = 0; i < requests.size(); ++i) {
    const Session* s = requests[i].session;
    const std::string which = "generate_batch: request " + std::to_string(i);
    if (s == nullptr) return invalid_argument(which + " has no session");
    if (!s->model().loaded()) return invalid_argument(which + ": the session has no model");
    if (model::Internal::impl(s->model()) != model::Internal::impl(requests[0].session->model())) {
      return invalid_argument(which + ": the session runs another model than request 0's");
    }
    for (size_t j = 0; j < i; ++j) {
      if (requests[j].session == s) {
        return invalid_argument(which + " uses the session of request " + std::to_string(j) +
                                " (one reply per session)");
      }
    }
  }
  BatchGenerator batch;
  std::vector<Result<GenerateStats>> results;
  std::vector<int> ids;
  try {
    results.assign(requests.size(), Result<GenerateStats>(invalid_argument("generate_batch: not run")));
    ids.assign(requests.size(), -1);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "generate_batch: cannot allocate the results");
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    auto id = batch.add(*r.session, r.prompt_tokens, r.params, r.on_token);
    if (id.ok()) {
      ids[i] = id.value();
    } else {
      results[i] = id.status();
    }
  }
  // A failed step has finished every reply in it (each has its error), so
  // this ends: every step finishes replies or moves each one token on.
  while (!batch.done()) (void)batch.step();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ids[i] >= 0) results[i] = batch.result(ids[i]);
  }
  return results;
}

}  // namespace flashscope

// model::Internal: the one door from the engine's code (engine/) and the
// forward front door (backends/forward.cpp) into the private parts of the
// public classes: a Model's Impl, a Sequence's backend state, a Session's
// sequence, pending token and cancel flag. The public headers name it as a
// friend and nothing else, so callers see no backend types.
#pragma once

#include <atomic>
#include <cstdint>

#include "flashscope/model.hpp"
#include "flashscope/session.hpp"
#include "model/model_impl.hpp"

namespace flashscope::model {

struct Internal {
  static const Model::Impl* impl(const Model& m) { return m.impl_.get(); }
  static Sequence::State* state(Sequence& s) { return s.state_.get(); }
  static const Sequence::State* state(const Sequence& s) { return s.state_.get(); }
  static Sequence& sequence(Session& s) { return s.seq_; }
  static const Model& model(const Session& s) { return s.model_; }
  static int32_t& pending(Session& s) { return s.pending_; }
  static std::atomic<bool>& cancel_flag(Session& s) { return s.cancel_.requested; }
};

}  // namespace flashscope::model

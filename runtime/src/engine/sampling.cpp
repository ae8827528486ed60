// Token sampling: repetition, presence and frequency penalties, greedy, temperature, top-k, top-p,
// min-p (see engine.hpp for the order and the rules), and the PRNG.
//
// Candidates are (id, logit) pairs. top_k keeps the k best by a partial
// sort; the softmax runs over what is left (max subtracted, in double);
// top_p walks the probabilities in descending order and keeps the shortest
// prefix whose mass reaches top_p (at least one token); min_p drops tokens
// whose probability is below min_p × the best one's. The draw is inverse
// CDF over the survivors' renormalized probabilities.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "flashscope/sampling.hpp"

namespace flashscope {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

struct Candidate {
  int32_t id;
  float logit;
  double p;
};

bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

PenaltyPlan plan_penalties(const SamplingParams& params, const std::vector<int32_t>& recent, size_t generated,
                           int32_t vocab) {
  PenaltyPlan plan;
  const size_t n = recent.size();
  std::unordered_map<int32_t, int> at;  // id → its index in plan.ids
  if (params.repetition_penalty != 1.0f && params.repetition_penalty > 0.0f) {
    const size_t window = params.repeat_last_n < 0 ? n : std::min(n, static_cast<size_t>(params.repeat_last_n));
    for (size_t i = n - window; i < n; ++i) {
      const int32_t id = recent[i];
      if (id < 0 || id >= vocab || !at.emplace(id, static_cast<int>(plan.ids.size())).second) continue;
      plan.ids.push_back(id);
    }
    plan.num_repeat = static_cast<int>(plan.ids.size());
  }
  // The additive penalties: sub[j] for ids[j], growing as ids are added.
  std::vector<float> sub(plan.ids.size(), 0.0f);
  auto add = [&](int32_t id, float amount) {
    const auto [it, added] = at.emplace(id, static_cast<int>(plan.ids.size()));
    if (added) {
      plan.ids.push_back(id);
      sub.push_back(0.0f);
    }
    sub[static_cast<size_t>(it->second)] += amount;
  };
  bool any = false;
  const float presence = params.presence_penalty, frequency = params.frequency_penalty;
  // Non-finite values are refused by generate; here they switch the penalty off.
  if ((presence != 0.0f || frequency != 0.0f) && std::isfinite(presence) && std::isfinite(frequency)) {
    std::vector<int> count;
    std::unordered_map<int32_t, int> counted;  // id → its index in count
    std::vector<int32_t> order;
    for (size_t i = n - std::min(n, generated); i < n; ++i) {
      const int32_t id = recent[i];
      if (id < 0 || id >= vocab) continue;
      const auto [it, added] = counted.emplace(id, static_cast<int>(count.size()));
      if (added) {
        count.push_back(0);
        order.push_back(id);
      }
      ++count[static_cast<size_t>(it->second)];
    }
    for (size_t j = 0; j < order.size(); ++j) add(order[j], presence + frequency * static_cast<float>(count[j]));
    any = !order.empty();
  }
  const float dry = params.dry_multiplier;
  if (dry > 0.0f && std::isfinite(dry) && params.dry_allowed_length >= 1 && n >= 2) {
    // Every earlier position j whose token equals the last one ends a run
    // of L tokens equal to the last L (compared backwards, at most
    // kDryMaxRun); the token that followed j, recent[j + 1], would extend
    // that run to L + 1. Each candidate keeps its longest L.
    const size_t window = params.dry_last_n < 0 ? n : std::min(n, static_cast<size_t>(params.dry_last_n));
    const size_t first = n - window;
    std::unordered_map<int32_t, int> longest;
    for (size_t j = first; j + 1 < n; ++j) {
      if (recent[j] != recent[n - 1]) continue;
      int run = 0;
      while (run < kDryMaxRun && j >= first + static_cast<size_t>(run) &&
             recent[j - static_cast<size_t>(run)] == recent[n - 1 - static_cast<size_t>(run)]) {
        ++run;
      }
      const int32_t next = recent[j + 1];
      if (run >= params.dry_allowed_length && next >= 0 && next < vocab) {
        int& best = longest[next];
        best = std::max(best, run);
      }
    }
    // In recent's order, so the plan does not depend on the map's.
    for (size_t j = first + 1; j < n; ++j) {
      const auto it = longest.find(recent[j]);
      if (it == longest.end() || it->second == 0) continue;
      add(it->first, dry * std::pow(params.dry_base, static_cast<float>(it->second - params.dry_allowed_length)));
      it->second = 0;  // once
      any = true;
    }
  }
  if (any) plan.sub = std::move(sub);
  return plan;
}

int32_t sample(const std::vector<float>& logits_in, const SamplingParams& params, Rng& rng,
               const std::vector<int32_t>& recent_tokens, size_t generated) {
  const int32_t vocab = static_cast<int32_t>(logits_in.size());
  if (vocab == 0) return 0;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  const PenaltyPlan plan = plan_penalties(params, recent_tokens, generated, vocab);
  if (params.temperature <= 0.0f && plan.ids.empty()) {
    // Greedy without penalties (the engine's default): the argmax where the
    // logits lie, as the candidates below would give it (the lowest id on
    // ties, non-finite logits as −inf), without building a vocabulary-long
    // list each token.
    int32_t best = 0;
    float best_logit = kNegInf;
    for (int32_t i = 0; i < vocab; ++i) {
      const float l = logits_in[static_cast<size_t>(i)];
      if (std::isfinite(l) && l > best_logit) {
        best_logit = l;
        best = i;
      }
    }
    return best;
  }

  std::vector<Candidate> cand(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) {
    const float l = logits_in[static_cast<size_t>(i)];
    cand[static_cast<size_t>(i)] = {i, std::isfinite(l) ? l : kNegInf, 0.0};
  }

  for (size_t j = 0; j < plan.ids.size(); ++j) {
    float& l = cand[static_cast<size_t>(plan.ids[j])].logit;
    if (j < static_cast<size_t>(plan.num_repeat))
      l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    if (!plan.sub.empty()) l -= plan.sub[j];
  }

  const auto best_it = std::min_element(cand.begin(), cand.end(), better);  // "min" under `better` = the best
  if (params.temperature <= 0.0f || best_it->logit == kNegInf) return best_it->id;

  for (Candidate& c : cand) c.logit /= params.temperature;
  size_t keep = cand.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), better);
  } else {
    std::sort(cand.begin(), cand.end(), better);
  }
  cand.resize(keep);
  // -inf logits have probability 0: drop them so they are never drawn.
  while (cand.size() > 1 && cand.back().logit == kNegInf) cand.pop_back();

  const double max_logit = cand.front().logit;
  double total = 0.0;
  for (Candidate& c : cand) {
    c.p = std::exp(static_cast<double>(c.logit) - max_logit);
    total += c.p;
  }
  for (Candidate& c : cand) c.p /= total;

  if (params.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < cand.size()) {
      mass += cand[n].p;
      ++n;
      if (mass >= static_cast<double>(params.top_p)) break;
    }
    cand.resize(std::max<size_t>(n, 1));
  }
  if (params.min_p > 0.0f) {
    const double threshold = static_cast<double>(params.min_p) * cand.front().p;
    size_t n = 1;
    while (n < cand.size() && cand[n].p >= threshold) ++n;
    cand.resize(n);
  }

  double left = 0.0;
  for (const Candidate& c : cand) left += c.p;
  const double r = rng.uniform() * left;
  double acc = 0.0;
  for (const Candidate& c : cand) {
    acc += c.p;
    if (r < acc) return c.id;
  }
  return cand.back().id;  // r within rounding of `left`
}

}  // namespace flashscope

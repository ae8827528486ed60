// Sampling the next token from a row of logits: the parameters every
// generate() takes, a portable PRNG, and the host sampler (on CUDA the
// engine runs the same steps on the device with the same Rng draws).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace flashscope {

struct SamplingParams {
  // ≤ 0: greedy (argmax; every other field but repetition_penalty is ignored).
  float temperature = 0.0f;
  int top_k = 0;            // keep the k most likely tokens; ≤ 0: all
  float top_p = 1.0f;       // keep the smallest set with probability ≥ top_p; ≥ 1: all
  float min_p = 0.0f;       // drop tokens below min_p × the top probability; ≤ 0: none
  float repetition_penalty = 1.0f;  // > 1 discourages tokens among the recent ones (CTRL / HF rule)
  int repeat_last_n = 64;   // how many recent tokens the penalty looks at; < 0: all
  // OpenAI's additive penalties, in [-2, 2], over the tokens this reply has
  // generated so far (not the prompt): a token seen c times loses
  // presence_penalty·[c > 0] + frequency_penalty·c from its logit. 0: off.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // DRY ("don't repeat yourself", as llama.cpp's sampler of that name,
  // without sequence breakers): a token that would extend a run of the
  // last L tokens that already appeared earlier, followed by that token,
  // loses dry_multiplier · dry_base^(L − dry_allowed_length) from its logit
  // when L ≥ dry_allowed_length (L counted up to kDryMaxRun). It ends the
  // loops a small model falls into ("la France, la France, ...") and leaves
  // single repeated words alone. Runs are searched in the last dry_last_n
  // tokens of the conversation (< 0: all of it). 0: off.
  float dry_multiplier = 0.0f;
  float dry_base = 1.75f;
  int dry_allowed_length = 2;
  int dry_last_n = -1;
  uint64_t seed = 0;
};

// The longest run DRY measures: the search costs O(window · kDryMaxRun) per
// token, and past this length the penalty has long excluded the token.
inline constexpr int kDryMaxRun = 48;

// A small, portable PRNG (splitmix64-seeded xoshiro256**): the same seed
// gives the same samples on every platform and compiler.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 bits

 private:
  uint64_t s_[4];
};

// Picks the next token from `logits` [vocab]. The steps, in order:
//   1. repetition penalty on the last repeat_last_n of recent_tokens: a
//      positive logit is divided by the penalty, a negative one multiplied;
//      then the presence and frequency penalties, counted over the last
//      `generated` of recent_tokens (the reply's own; default: all of them),
//      and the DRY penalty over the last dry_last_n of recent_tokens;
//   2. temperature ≤ 0 → the argmax (the lowest id on ties);
//   3. logits / temperature, top_k, softmax, top_p (nucleus), min_p;
//   4. one draw from what is left, renormalized.
// Non-finite logits are treated as -inf; if every logit is -inf the argmax
// rule returns 0. logits must be non-empty.
int32_t sample(const std::vector<float>& logits, const SamplingParams& params, Rng& rng,
               const std::vector<int32_t>& recent_tokens,
               size_t generated = std::numeric_limits<size_t>::max());

// Where the penalties of step 1 land, as sample() and the device sampler
// both apply them: distinct ids in [0, vocab); the first num_repeat get the
// repetition penalty, then every one loses sub[j] (sub is empty when the
// presence, frequency and DRY penalties are 0 or find nothing).
struct PenaltyPlan {
  std::vector<int32_t> ids;
  int num_repeat = 0;
  std::vector<float> sub;
};
PenaltyPlan plan_penalties(const SamplingParams& params, const std::vector<int32_t>& recent_tokens, size_t generated,
                           int32_t vocab);

}  // namespace flashscope

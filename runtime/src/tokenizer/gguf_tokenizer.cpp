// Reads the tokenizer.ggml.* keys of a GGUF file (see gguf_tokenizer.hpp).
#include "tokenizer/gguf_tokenizer.hpp"

#include <string>
#include <utility>
#include <vector>

namespace flashscope::tokenizer {

namespace {

Status corrupt(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }

}  // namespace

Result<Tokenizer> load_gguf_tokenizer(const GgufFile& f, int64_t vocab) {
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  std::string pre;
  if (f.has_key("tokenizer.ggml.pre")) {
    auto v = f.get_string("tokenizer.ggml.pre");  // a key of another type is named as such
    if (!v.ok()) return v.status();
    pre = v.value();
  }
  auto config = tokenizer_config_from_names(model.value(), pre);
  if (!config.ok()) return config.status();
  const bool spm = config.value().model == TokenizerModel::kSentencePiece;

  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (vocab < 0) vocab = static_cast<int64_t>(tokens.value().size());
  if (static_cast<int64_t>(tokens.value().size()) != vocab) {
    return corrupt("tokenizer.ggml.tokens has " + std::to_string(tokens.value().size()) +
                   " entries but the model's vocabulary is " + std::to_string(vocab));
  }
  std::vector<int32_t> types;
  if (f.has_key("tokenizer.ggml.token_type")) {
    auto types64 = f.get_int_array("tokenizer.ggml.token_type");
    if (!types64.ok()) return types64.status();
    if (static_cast<int64_t>(types64.value().size()) != vocab) {
      return corrupt("tokenizer.ggml.token_type has " + std::to_string(types64.value().size()) +
                     " entries for " + std::to_string(vocab) + " tokens");
    }
    types.reserve(types64.value().size());
    for (size_t i = 0; i < types64.value().size(); ++i) {
      const int64_t t = types64.value()[i];
      if (t < 1 || t > 6) {  // checked before narrowing: 2^32 + 1 must not pass as 1
        return corrupt("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                       " is not a token type (1 normal .. 6 byte)");
      }
      types.push_back(static_cast<int32_t>(t));
    }
  }
  std::vector<std::string> merges;
  if (spm) {
    // Scores drive SentencePiece merges; without them every pair would tie.
    auto scores = f.get_float_array("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    if (static_cast<int64_t>(scores.value().size()) != vocab) {
      return corrupt("tokenizer.ggml.scores has " + std::to_string(scores.value().size()) + " entries for " +
                     std::to_string(vocab) + " tokens");
    }
    config.value().scores = std::move(scores).value();
    if (f.has_key("tokenizer.ggml.add_space_prefix")) {
      auto v = f.get_bool("tokenizer.ggml.add_space_prefix");
      if (!v.ok()) return v.status();
      config.value().add_space_prefix = v.value();
    }
  } else {
    auto m = f.get_string_array("tokenizer.ggml.merges");
    if (!m.ok()) return m.status();
    merges = std::move(m).value();
  }

  SpecialTokens sp;
  auto id_of = [&](const char* key, int32_t* out) -> Status {
    if (!f.has_key(key)) return Status::ok_status();
    auto v = f.get_int(key);
    if (!v.ok()) return v.status();
    if (v.value() < 0 || v.value() >= vocab) {
      return corrupt(std::string(key) + " = " + std::to_string(v.value()) + " is outside the vocabulary");
    }
    *out = static_cast<int32_t>(v.value());
    return Status::ok_status();
  };
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.bos_token_id", &sp.bos_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.eos_token_id", &sp.eos_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.unknown_token_id", &sp.unk_id));
  FLASHSCOPE_RETURN_IF_ERROR(id_of("tokenizer.ggml.padding_token_id", &sp.pad_id));
  // llama.cpp's defaults where the key is absent: SentencePiece and
  // llama-bpe add BOS, the other BPE pre-tokenizers do not.
  sp.add_bos = spm || config.value().pre == PreTokenizer::kLlama3;
  if (f.has_key("tokenizer.ggml.add_bos_token")) {
    auto add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!add_bos.ok()) return add_bos.status();
    sp.add_bos = add_bos.value();
  }
  if (sp.add_bos && sp.bos_id < 0) {
    return corrupt("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  return Tokenizer::create(std::move(tokens).value(), std::move(types), std::move(merges), sp,
                           std::move(config).value());
}

}  // namespace flashscope::tokenizer

// The models the app can switch to: the GGUF files in the folders the
// default model is looked up in (FLASHSCOPE_MODEL_DIR, assets/models/ beside
// the executable's checkout or the working directory), each with the facts
// its header says — read without loading a weight, so listing is cheap.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/status.hpp"

namespace flashscope::app {

struct ModelFacts {
  std::string path;
  std::string file_name;      // without the folder
  std::string architecture;   // general.architecture: "llama", "gemma3"
  std::string name;           // general.name; may be empty
  uint64_t file_bytes = 0;
  int64_t parameters = 0;     // elements of all tensors
  int64_t context_length = 0; // <arch>.context_length; 0 when absent
  bool has_chat_template = false;  // tokenizer.chat_template present and not empty
  std::string tokenizer;      // tokenizer.ggml.model: "gpt2" (BPE), "llama" (SentencePiece)
  // Weight types by share of the parameters, largest first: {"Q4_K", 0.61}.
  std::vector<std::pair<std::string, double>> weight_types;
};

// The header's facts; the GGUF reader's error for a file that is not a
// readable GGUF.
Result<ModelFacts> read_model_facts(const std::string& path);

// The folders searched, in order, those that exist, without duplicates:
// FLASHSCOPE_MODEL_DIR, the folder of the default model as the CLI finds
// it, ./assets/models.
std::vector<std::string> model_search_dirs();

// Every *.gguf in `dirs` (each file once, sorted by name within a folder).
// Files whose header cannot be read are listed too, with the error, so a
// broken download is visible rather than missing.
struct CatalogEntry {
  ModelFacts facts;  // facts.path and file_name always set
  std::string error; // why the header could not be read; empty when it was
};
std::vector<CatalogEntry> list_models(const std::vector<std::string>& dirs);

// True when both paths name the same existing file ("assets/models/x.gguf"
// and its absolute path).
bool same_file(const std::string& a, const std::string& b);

// "SentencePiece", "BPE (GPT-2 style)", else the raw name.
std::string tokenizer_kind_label(const std::string& ggml_model);
// "135M", "268M", "1.2B".
std::string parameter_label(int64_t parameters);
// "Q4_K 61% · Q6_K 24% · …": the first max_types types, then "· …" when there are more.
std::string weight_types_label(const ModelFacts& facts, size_t max_types = 3);

}  // namespace flashscope::app

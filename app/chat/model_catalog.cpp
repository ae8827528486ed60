#include "chat/model_catalog.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/repo_file.hpp"

namespace flashscope::app {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The same folder reached by two spellings ("assets/models" and the
// absolute path) is listed once.
std::string canonical(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (!real) return path;
  std::string out(real);
  std::free(real);
  return out;
}

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

Result<ModelFacts> read_model_facts(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.status();
  const GgufFile& g = file.value();
  ModelFacts f;
  f.path = path;
  const size_t slash = path.find_last_of('/');
  f.file_name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  f.file_bytes = g.file_size();
  auto string_or_empty = [&](const std::string& key) {
    if (!g.has_key(key)) return std::string();
    auto v = g.get_string(key);
    return v.ok() ? v.value() : std::string();
  };
  f.architecture = string_or_empty("general.architecture");
  f.name = string_or_empty("general.name");
  f.tokenizer = string_or_empty("tokenizer.ggml.model");
  f.has_chat_template = !string_or_empty("tokenizer.chat_template").empty();
  if (!f.architecture.empty() && g.has_key(f.architecture + ".context_length")) {
    auto n = g.get_int(f.architecture + ".context_length");
    if (n.ok()) f.context_length = n.value();
  }
  std::map<std::string, int64_t> by_type;
  for (const GgufTensor& t : g.tensors()) {
    f.parameters += t.n_elements();
    by_type[ggml_type_name(t.type)] += t.n_elements();
  }
  for (const auto& [type, n] : by_type)
    f.weight_types.emplace_back(type, f.parameters > 0 ? static_cast<double>(n) / f.parameters : 0.0);
  std::stable_sort(f.weight_types.begin(), f.weight_types.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return f;
}

std::vector<std::string> model_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("FLASHSCOPE_MODEL_DIR"); dir && *dir) dirs.emplace_back(dir);
  const std::string found = find_repo_file(std::string("assets/models/") + kDefaultModelFile);
  if (!found.empty()) dirs.push_back(parent_dir(found));
  dirs.emplace_back("assets/models");
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& d : dirs) {
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // only folders that exist
    if (seen.insert(canonical(d)).second) out.push_back(d);
  }
  return out;
}

std::vector<CatalogEntry> list_models(const std::vector<std::string>& dirs) {
  std::vector<CatalogEntry> out;
  std::set<std::string> seen;
  for (const std::string& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (ends_with(name, ".gguf")) names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string path = dir + "/" + name;
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (!seen.insert(canonical(path)).second) continue;
      CatalogEntry entry;
      auto facts = read_model_facts(path);
      if (facts.ok()) {
        entry.facts = std::move(facts).value();
      } else {
        entry.facts.path = path;
        entry.facts.file_name = name;
        entry.facts.file_bytes = static_cast<uint64_t>(st.st_size);
        entry.error = facts.status().to_string();
      }
      out.push_back(std::move(entry));
    }
  }
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (a.empty() || b.empty() || ::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string tokenizer_kind_label(const std::string& ggml_model) {
  if (ggml_model == "llama") return "SentencePiece";
  if (ggml_model == "gpt2") return "BPE (GPT-2 style)";
  return ggml_model.empty() ? "unknown" : ggml_model;
}

std::string parameter_label(int64_t parameters) {
  char buf[32];
  if (parameters >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.1fB", parameters / 1e9);
  else std::snprintf(buf, sizeof buf, "%.0fM", parameters / 1e6);
  return buf;
}

std::string weight_types_label(const ModelFacts& facts, size_t max_types) {
  std::string out;
  size_t shown = 0;
  for (const auto& [type, share] : facts.weight_types) {
    if (shown == max_types) {
      out += " · …";
      break;
    }
    char buf[48];
    if (share < 0.005) std::snprintf(buf, sizeof buf, "%s%s <1%%", shown ? " · " : "", type.c_str());
    else std::snprintf(buf, sizeof buf, "%s%s %.0f%%", shown ? " · " : "", type.c_str(), share * 100.0);
    out += buf;
    ++shown;
  }
  return out;
}

}  // namespace flashscope::app

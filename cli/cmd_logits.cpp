// `flashscope-cli logits`: the model's logits at every position of a prompt,
// written as .npy, so another runtime (llama.cpp, transformers) can be
// compared with ours on the same token ids (scripts/compare_llamacpp.py).
//
//   tokens.npy  int32 [n]          the ids the prompt encodes to (BOS per the file), or --tokens' own
//   logits.npy  float32 [n, vocab] row i: the distribution of the token after position i
//
// The prompt runs as one forward call (--chunk 0) or in chunks of --chunk
// tokens, each continuing the cache of the previous ones: chunk 1 is the
// decode path, one token at a time.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/device.hpp"
#include "flashscope/model.hpp"
#include "npy.hpp"

namespace flashscope::cli {
namespace {

constexpr const char* kUsage =
    "usage: flashscope-cli logits [-m PATH] (-p TEXT | --tokens FILE.npy) --out DIR [--chunk N]\n"
    "                             [--device cpu|cuda] [--weights auto|quantized|bf16] [--kv-type bf16|q8_0|q4_0] [-t N]\n"
    "  -p, --prompt TEXT     the prompt, encoded with the model's tokenizer (BOS as the file says)\n"
    "  --tokens FILE.npy     int32 or int64 token ids to run instead of a prompt\n"
    "  --out DIR             writes DIR/tokens.npy (int32 [n]) and DIR/logits.npy (float32 [n, vocab])\n"
    "  --chunk N             tokens per forward call (default 0: the whole prompt in one call; 1: decode steps)\n"
    "  --device cpu|cuda     where to run (default: cuda when a device is present)\n"
    "  --kv-type bf16|q8_0|q4_0  cpu: the KV cache's element type (default bf16), to see what q8_0 or\n"
    "                        q4_0 changes\n";

Result<std::vector<int32_t>> read_tokens(const std::string& path) {
  auto arr = read_npy(path);
  if (!arr.ok()) return arr.status();
  const NpyArray& a = arr.value();
  if (a.shape.size() != 1) return invalid_argument("--tokens: expected a 1-d array of token ids");
  std::vector<int32_t> ids(static_cast<size_t>(a.shape[0]));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (a.dtype == "<i4") {
      ids[i] = reinterpret_cast<const int32_t*>(a.data.data())[i];
    } else if (a.dtype == "<i8") {
      const int64_t v = reinterpret_cast<const int64_t*>(a.data.data())[i];
      if (v < 0 || v > INT32_MAX) return invalid_argument("--tokens: id " + std::to_string(v) + " is out of range");
      ids[i] = static_cast<int32_t>(v);
    } else {
      return invalid_argument("--tokens: ids must be int32 or int64, not " + a.dtype);
    }
  }
  return ids;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "prompt", "tokens", "out", "chunk", "device", "weights", "threads", "kv-type"}, {"help"});
  if (!args.ok() || args.has("help")) {
    const bool usage_error = !args.ok();
    std::fprintf(usage_error ? stderr : stdout, "%s%s%s", args.error().c_str(), args.error().empty() ? "" : "\n",
                 kUsage);
    return usage_error ? 2 : 0;
  }
  if (args.has("prompt") == args.has("tokens") || !args.has("out")) {
    std::fprintf(stderr, "flashscope-cli logits: give -p TEXT or --tokens FILE, and --out DIR\n%s", kUsage);
    return 2;
  }
  const int chunk = static_cast<int>(args.get_int_in("chunk", 0, 0, 1 << 20));
  const int threads = parse_threads(args, "logits");
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  const WeightFormat weights = parse_weights(args);
  const KvType kv_type = parse_kv_type_flag(args);
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  ModelOptions mo;
  mo.threads = threads;
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "flashscope-cli logits: --device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }
  mo.device = device == "cuda" ? Device::kCuda : Device::kCpu;
  mo.weights = weights;
  mo.kv_type = kv_type;

  const std::string path = resolve_model_path(args);
  if (path.empty()) {
    std::fputs(missing_model_message("logits").c_str(), stderr);
    return 1;
  }
  auto model = Model::load(path, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli logits: cannot load %s: %s\n", path.c_str(), model.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> ids;
  if (args.has("tokens")) {
    auto read = read_tokens(args.get("tokens"));
    if (!read.ok()) {
      std::fprintf(stderr, "flashscope-cli logits: %s\n", read.status().to_string().c_str());
      return 1;
    }
    ids = std::move(read).value();
  } else {
    const Tokenizer& tok = model->tokenizer();
    ids = tok.encode(args.get("prompt"), /*parse_special=*/true);
    if (tok.add_bos() && tok.bos_id() >= 0) ids.insert(ids.begin(), tok.bos_id());
  }
  if (ids.empty()) {
    std::fprintf(stderr, "flashscope-cli logits: no tokens to run\n");
    return 2;
  }
  auto seq = model->new_sequence(static_cast<int>(ids.size()));
  if (!seq.ok()) {
    std::fprintf(stderr, "flashscope-cli logits: %s\n", seq.status().to_string().c_str());
    return 1;
  }
  const int vocab = model->config().vocab;
  const int n = static_cast<int>(ids.size());
  const int step = chunk > 0 ? chunk : n;
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(vocab));
  std::vector<float> part;
  for (int i0 = 0; i0 < n; i0 += step) {
    const int cn = std::min(step, n - i0);
    const std::vector<int32_t> piece(ids.begin() + i0, ids.begin() + i0 + cn);
    const Status st = model->forward(*seq, piece, {}, LogitsMode::kAll, &part);
    if (!st.ok()) {
      std::fprintf(stderr, "flashscope-cli logits: forward at token %d: %s\n", i0, st.to_string().c_str());
      return 1;
    }
    std::copy(part.begin(), part.end(), all.begin() + static_cast<size_t>(i0) * static_cast<size_t>(vocab));
  }
  const std::string out = args.get("out");
  Status st = write_npy(out + "/tokens.npy", "<i4", {n}, ids.data());
  if (st.ok()) st = write_npy(out + "/logits.npy", "<f4", {n, vocab}, all.data());
  if (!st.ok()) {
    std::fprintf(stderr, "flashscope-cli logits: %s\n", st.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "flashscope-cli logits: %d tokens x %d logits on %s -> %s\n", n, vocab, device.c_str(),
               out.c_str());
  return 0;
}

}  // namespace flashscope::cli

// A decoder-only language model (llama, qwen2, qwen3, gemma3, phi3) loaded from a GGUF file, and the forward
// pass that runs a batch of new tokens of one sequence against its KV cache,
// or one new token of each of several sequences together.
//
//   auto model = flashscope::Model::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto seq = model->new_sequence();                  // an empty KV cache
//   std::vector<float> logits;
//   model->forward(*seq, prompt_ids, {}, LogitsMode::kLast, &logits);  // prefill
//   model->forward(*seq, {next_id}, {}, LogitsMode::kLast, &logits);   // decode
//   model->forward_batch({&seq_a, &seq_b}, {next_a, next_b}, &logits); // decode both: [2, vocab]
//
// Weights stay memory-mapped in their GGUF blocks (Q4_1, Q8_0, ...): nothing
// is expanded to float, so a model costs about its file size in memory. The
// matrix products quantize activations to 8 bits per 32-element block and
// use integer dot products against the weight blocks (llama.cpp's scheme);
// other weight types fall back to dequantize-then-dot.
//
// Architectures (ModelConfig::arch): token embedding, per layer RMSNorm →
// Q/K/V (+ bias) → [per-head QK RMSNorm] → RoPE → causal GQA attention over
// the cache (sliding window where the layer has one) → O → [post-norm] →
// residual → RMSNorm → gated FFN (SiLU or GELU-tanh) → [post-norm] →
// residual, then final RMSNorm and the LM head (token_embd when
// output.weight is absent). Which pieces a family has is in ModelConfig.
//
// Numerics: logits differ from a float reference by the 8-bit activation
// rounding (llama.cpp's trade; tests/test_model_cpu.cpp measures it against
// HF transformers). Prefill and decode of the same tokens agree to float
// noise with the portable kernels; the AVX2 prefill groups tokens by four
// and sums in another order, which the activation rounding can amplify to
// the same size as the rounding itself. Results are deterministic for a
// given sequence of calls.
//
// Threading: a Model is immutable after load; copies share it and forward()
// may run on several threads at once for different Sequences. One Sequence
// must not be used from two threads at once (forward_batch uses all of its
// sequences). The CPU backend uses OpenMP inside every call. On CUDA,
// forward_batch calls of one model run one at a time (they share the
// model's batch scratch); forward() calls do not wait for them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "flashscope/sampling_defaults.hpp"
#include "flashscope/status.hpp"
#include "flashscope/tensor.hpp"
#include "flashscope/tokenizer.hpp"

namespace flashscope {

class ChatTemplate;  // flashscope/chat_template.hpp

namespace model {
struct Internal;  // the engine's access to backend state (runtime/src/model/internal.hpp)
}  // namespace model

// The default model's file name, and where tools look for it: the first
// existing of $FLASHSCOPE_MODEL_DIR/<file>, ./assets/models/<file>, and
// assets/models/<file> in the running executable's directory or any parent
// (so a build tree inside the repository finds the repository's assets/).
// Empty when none exists; scripts/fetch_model.sh downloads it.
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
std::string find_default_model();

// The model families the engine runs (GGUF general.architecture).
//   llama   SmolLM2, TinyLlama, Llama 2/3.x (rope_freqs factors), optional Q/K/V/O biases
//   qwen2   Qwen2.5: Q/K/V biases, NeoX RoPE
//   qwen3   per-head RMSNorm of Q and K before RoPE, head_dim independent of hidden, NeoX RoPE
//   gemma3  embeddings × √hidden, norms before and after attention and FFN, GELU-tanh gated FFN,
//           QK-norm, sliding window on 5 of every 6 layers with their own RoPE base
//   phi3    fused QKV (attn_qkv) and gate-up (ffn_up [2·ffn]) weights, NeoX RoPE; no LongRoPE
enum class Architecture : uint8_t { kLlama, kQwen2, kQwen3, kGemma3, kPhi3 };
// general.architecture's spelling ("llama", "qwen2", "qwen3", "gemma3", "phi3").
const char* architecture_name(Architecture arch);
// The supported names, comma-separated, for messages.
const char* supported_architectures();

// Which elements RoPE rotates together inside a head of rope_dim leading
// elements: kPairs (x[2i], x[2i+1]): llama GGUFs, whose converter permutes
// Q and K; kHalves (x[i], x[i + rope_dim/2]): NeoX style, unpermuted Q/K
// (qwen2, qwen3, gemma3, phi3). Pair i turns by pos · rope_scale · base^(−2i/rope_dim)
// / freq_factor[i].
enum class RopeStyle : uint8_t { kPairs, kHalves };

enum class FfnActivation : uint8_t {
  kSilu,      // silu(gate) · up (SwiGLU)
  kGeluTanh,  // gelu_tanh(gate) · up (GeGLU, Gemma)
};

// What differs between the layers of one model.
struct LayerConfig {
  // Sliding-window attention: 0 means the whole causal context; W > 0 means
  // the token at position p attends to keys at positions (p − W, p], W keys
  // including itself (llama.cpp's n_swa; transformers' sliding_window).
  int window = 0;
  float rope_base = 10000.0f;
  float rope_scale = 1.0f;  // positions are multiplied by this (linear rope scaling: 1 / factor)
};

// The shape of a model, from its GGUF metadata ("{arch}.*" keys).
struct ModelConfig {
  std::string architecture;  // general.architecture
  Architecture arch = Architecture::kLlama;
  std::string name;          // general.name (informational, may be empty)
  int n_layers = 0;          // block_count
  int hidden = 0;            // embedding_length
  int n_heads = 0;           // attention.head_count
  int n_kv_heads = 0;        // attention.head_count_kv (= n_heads when absent)
  int head_dim = 0;          // attention.key_length, else hidden / n_heads (Q is n_heads·head_dim wide)
  int ffn = 0;               // feed_forward_length
  int vocab = 0;             // vocab_size, else the length of tokenizer.ggml.tokens
  int context_length = 0;    // context_length: the longest sequence the model was trained on
  float rope_base = 10000.0f;  // rope.freq_base (the global layers' base)
  int rope_dim = 0;          // rope.dimension_count, else head_dim: leading dims rotated per head
  float rms_eps = 1e-5f;     // attention.layer_norm_rms_epsilon
  bool tied_embeddings = false;  // no output.weight: the LM head is token_embd

  RopeStyle rope_style = RopeStyle::kPairs;
  float rope_scale = 1.0f;          // rope.scaling.type "linear": 1 / rope.scaling.factor (global layers)
  bool rope_freq_factors = false;   // a rope_freqs.weight tensor [rope_dim/2] divides each pair's frequency
  bool qkv_bias = false;            // attn_q/k/v.bias present (qwen2: required; llama: optional)
  bool qk_norm = false;             // attn_q_norm / attn_k_norm [head_dim], RMSNorm per head before RoPE
  bool post_norms = false;          // post_attention_norm, post_ffw_norm on each block's output (gemma3)
  FfnActivation ffn_activation = FfnActivation::kSilu;
  float embed_scale = 1.0f;         // token embeddings are multiplied by this (gemma3: √hidden)
  float attn_scale = 0.0f;          // softmax scale of Q·Kᵀ: 1/√head_dim as llama.cpp takes it for these families
  int sliding_window = 0;           // attention.sliding_window (gemma3), 0 when the model has none
  // Per layer: window and RoPE base. gemma3: layer l slides (window =
  // sliding_window, rope base rope.freq_base_swa else 10000, no scaling)
  // unless (l + 1) % 6 == 0, as llama.cpp's set_swa_pattern(6).
  std::vector<LayerConfig> layers;

  // Reads and checks the metadata (not the tensors). kUnsupported for an
  // architecture not listed above (the message names the supported ones),
  // rope scaling other than none/linear, or key_length != value_length;
  // kCorruptData for a missing key or inconsistent values, naming the key.
  static Result<ModelConfig> from_gguf(const GgufFile& file);
  // The consistency checks of from_gguf, for a config built by hand
  // (an empty `layers` is filled by from_gguf only; validate accepts it
  // empty or of n_layers entries).
  Status validate() const;
  // Layer l's window and RoPE (from `layers`, or the model-wide values when empty).
  LayerConfig layer(int l) const;
};

// The most CPU threads a forward pass may be asked for (ModelOptions::threads;
// FLASHSCOPE_MAX_THREADS in the C ABI). Far above any machine's cores; each
// OpenMP thread costs a stack, and 100000 of them crashed the runtime.
inline constexpr int kMaxThreads = 1024;

// When loading reads the weights for NaN and infinity (a file with them
// loads, then generates garbage).
enum class WeightCheck {
  kNewFiles,  // a file this process has not checked yet (same path, size, modification time)
  kAlways,
  kNever,     // for speed, with files you trust
};

// How a CUDA model keeps its weight matrices on the device.
enum class WeightFormat : uint8_t {
  // In their GGUF blocks where the GPU reads the type in place (Q4_0, Q4_1,
  // Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; other types as bf16): about the
  // file's size on the device, decode steps read 3-4× fewer bytes.
  kQuantized,
  // Every matrix dequantized to bf16 at load (cuBLAS and the bf16 fused
  // kernels): 2 bytes a weight, for small models at large batches.
  kBf16,
  // kBf16 for a model whose matrices hold fewer than kAutoBf16MaxWeights
  // weights, kQuantized from there up; Model::weight_format() tells which.
  kAuto,
};
// Below this many matrix weights (a bf16 copy under 1 GB) kAuto keeps bf16:
// a small model's step is bound by launches and arithmetic rather than by
// the bytes it reads, and there the bf16 kernels and cuBLAS measure faster
// than the quantized ones at every batch (bench/TUNING.md, "Quantized
// weights on the GPU"); its bf16 copy is also small beside a GPU's memory.
// Above it, decode is bound by the weight bytes each token reads, 3-4× fewer
// in the blocks, and the memory saved grows with the model.
inline constexpr uint64_t kAutoBf16MaxWeights = 500'000'000;
// "quantized" / "bf16" / "auto", and back (false for other text).
const char* weight_format_name(WeightFormat f);
bool parse_weight_format(const std::string& text, WeightFormat* out);

// What the KV cache keeps of each K and V element (ModelOptions::kv_type).
enum class KvType : uint8_t {
  kBF16,  // 2 bytes an element
  // Blocks of 32 along head_dim, 32 int8 and one fp16 scale each (1.0625
  // bytes an element, llama.cpp's q8_0 cache): about half the bytes a long
  // context's decode step reads. CPU only, head_dim a multiple of 32.
  kQ8_0,
  // Blocks of 32, 32 four-bit codes and one fp16 scale each (0.5625 bytes an
  // element, llama.cpp's q4_0 cache): a quarter of bf16's bytes, for long
  // contexts on a machine whose decode is bound by memory, at a cost in
  // agreement with the bf16 cache (tests/test_kv_q8_cpu.cpp measures it).
  // CPU only, head_dim a multiple of 32.
  kQ4_0,
};
// "bf16" / "q8_0" / "q4_0", and back (false for other text).
const char* kv_type_name(KvType t);
bool parse_kv_type(const std::string& text, KvType* out);
// Bytes of one token's K and V in every layer, for a config and cache type.
uint64_t kv_bytes_per_token(const ModelConfig& c, KvType t);

struct ModelOptions {
  Device device = Device::kCpu;  // kCuda: weights on the GPU (kUnsupported in a CPU-only build)
  // kCuda: how the weights are kept on the device (the CPU backend reads
  // the file's blocks either way).
  WeightFormat weights = WeightFormat::kAuto;
  // CPU threads of each forward pass. 0 (auto): up to cpu_threads()'s
  // default (OMP_NUM_THREADS, else the physical cores this process may run
  // on, at most kDefaultThreadsCap: cpu_threads.hpp), less the cores other programs are
  // keeping busy, re-measured every ~200 ms: every matmul ends in a barrier,
  // and on a busy machine a preempted thread costs the others a whole time
  // slice at each one (bench/TUNING.md#cpu). At most kMaxThreads.
  int threads = 0;
  // Element type of every sequence's KV cache. kQ8_0 or kQ4_0 on kCuda, or
  // for a head_dim not a multiple of 32, is kUnsupported at load.
  KvType kv_type = KvType::kBF16;
  // The NaN/inf check of the weights at load (check_tensor_finite, gguf.hpp):
  // a fraction of the load's own time (bench/TUNING.md#load); a failure is
  // kCorruptData naming the tensor.
  WeightCheck check_weights = WeightCheck::kNewFiles;
};

// Which logits forward() returns.
enum class LogitsMode : uint8_t {
  kNone,  // none (prefill of a prefix that will be continued)
  kLast,  // the last new token's: [vocab]
  kAll,   // every new token's: [n, vocab], token-major
};

class Model;

// One sequence's KV cache: per layer K and V in bf16, with room for
// capacity() tokens, reserved at creation. CPU: [tokens, kv_heads, head_dim]
// per layer, committed by the OS only as tokens arrive. CUDA: pages of the
// model's shared page pool (so a batched step reads every sequence's pages
// from one pool), [pages, kv_heads, 64, head_dim]. Move-only.
class Sequence {
 public:
  Sequence();
  ~Sequence();
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Tokens whose K and V are in the cache, in order.
  int n_tokens() const;
  int capacity() const;
  const std::vector<int32_t>& tokens() const;
  // Forgets every token (the memory stays reserved).
  void clear();
  // Keeps the first n tokens (regenerate, edit a message). kInvalidArgument
  // when n is negative or more than n_tokens(); nothing changes then.
  Status truncate(int n);
  // Bytes reserved for K and V.
  uint64_t cache_bytes() const;

  struct State;  // backend-specific; opaque to callers

 private:
  friend class Model;
  friend struct model::Internal;
  std::unique_ptr<State> state_;
};

class Model {
 public:
  // Maps the file, reads the config, checks every tensor the architecture
  // needs (present, type supported, shape matching the config: errors name
  // the tensor) and builds the tokenizer from the GGUF vocabulary. kIoError
  // when the file cannot be read, kCorruptData / kUnsupported as the checks
  // find.
  static Result<Model> load(const std::string& path, const ModelOptions& options = {});
  // The same from an opened file (in-memory models in tests).
  static Result<Model> from_gguf(GgufFile file, const ModelOptions& options = {});

  // An empty model (loaded() false). Exists for Result<Model>; use load().
  Model();
  bool loaded() const { return impl_ != nullptr; }

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  // tokenizer.chat_template (Jinja source), empty when the file has none.
  const std::string& chat_template() const;
  // The template parsed at load: nullptr when the file has none or it does
  // not parse. A template that does not parse does not fail the load;
  // chat_template_status() then says why (kUnsupported or kInvalidArgument,
  // naming the construct and its line:column), and ChatFormat falls back.
  const ChatTemplate* parsed_chat_template() const;
  const Status& chat_template_status() const;  // ok when parsed or absent
  Device device() const;
  // Bytes of weights the model reads (mapped from the file).
  uint64_t weight_bytes() const;
  // Device memory of a CUDA model's weights (0 on the CPU).
  uint64_t device_weight_bytes() const;
  // How the weights are kept: ModelOptions.weights with kAuto resolved
  // (kQuantized or kBf16; a CPU model reads the file's blocks either way).
  WeightFormat weight_format() const;
  // Token ids that end a reply: eos, and the control tokens named
  // <|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|>, <end_of_turn> (Gemma) when present.
  const std::vector<int32_t>& stop_tokens() const;
  // The sampling the model's makers recommend (sampling_defaults.hpp: the
  // file's general.sampling.* keys, else its model card), read at load.
  // GenerateParams' sampling stays greedy unless the caller takes these.
  const SamplingDefaults& sampling_defaults() const;

  // An empty sequence with room for max_tokens tokens (0 or more than the
  // context length: the model's context length). kOutOfMemory when the
  // cache cannot be reserved.
  Result<Sequence> new_sequence(int max_tokens = 0) const;

  // Runs `tokens` (n ≥ 1 new tokens of `seq`) through the model, appends
  // their K and V to the cache and writes the requested logits to *logits
  // (resized; may be null for kNone).
  //   positions: RoPE position of each token; empty means n_tokens() + i.
  // Errors, with seq left exactly as it was:
  //   kInvalidArgument  empty tokens, an id outside the vocabulary, a
  //                     positions size other than 0 or n, a negative
  //                     position, or n_tokens() + n > capacity() (the
  //                     message says how many tokens fit);
  //                     seq created by another model; a null logits pointer
  //                     with a mode other than kNone
  //   kOutOfMemory      scratch could not be allocated
  Status forward(Sequence& seq, const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                 LogitsMode mode, std::vector<float>* logits) const;

  // One decode step of several sequences together: tokens[i] is the next
  // token of *seqs[i], at position seqs[i]->n_tokens(). Every weight is read
  // once for the whole batch (each matrix product has seqs.size() rows);
  // attention runs per sequence over its own cache (CUDA: one paged
  // attention launch per layer over all of them). Writes the logits to
  // *logits as [seqs.size(), vocab], row i for seqs[i]; logits may be null
  // (no logits, the LM head is skipped).
  // Each row is what forward(*seqs[i], {tokens[i]}, {}, kLast, ...) gives:
  // bit for bit on the CPU; on CUDA within bf16 rounding (a GEMM of more
  // rows may sum in another order).
  // Errors, with every sequence left exactly as it was (all or nothing):
  //   kInvalidArgument  no sequences; tokens.size() != seqs.size(); a null
  //                     or empty sequence, one listed twice, or one of
  //                     another model; an id outside the vocabulary; a
  //                     sequence whose cache is full (the message names its
  //                     index: the caller drops it and runs the others)
  //   kOutOfMemory      scratch could not be allocated
  Status forward_batch(const std::vector<Sequence*>& seqs, const std::vector<int32_t>& tokens,
                       std::vector<float>* logits) const;

  struct Impl;

 private:
  friend struct model::Internal;
  explicit Model(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace flashscope

// The C ABI (flashscope/flashscope.h) over the C++ engine.
//
// Every exported function is noexcept in effect: its body runs inside
// guarded(), which turns an escaping std::bad_alloc into
// FLASHSCOPE_OUT_OF_MEMORY and anything else into FLASHSCOPE_DEVICE_ERROR,
// each with a message. Failures are recorded in a thread-local string
// (flashscope_last_error) and logged at ERROR through the log callback.
//
// A session keeps its message history beside the engine Session:
//   history[0, n_in_cache)     messages whose tokens are in the cache
//                              (replies included), in order
//   history[n_in_cache, end)   messages added since the last reply
// Each generate renders the whole history with the session's ChatFormat
// (the model's chat template, or ChatML) and feeds what the cache lacks
// (ChatFormat::next_turn), so the cache never has to be tracked by hand.
#include "flashscope/flashscope.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/attention_capture.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/model.hpp"
#include "flashscope/request_queue.hpp"
#include "flashscope/status.hpp"
#include "flashscope/trace_file.hpp"
#include "flashscope/untrusted.hpp"

// The handles. Defined at global scope: the header declares them there.
struct flashscope_model {
  flashscope::Model model;
};

struct flashscope_queue {
  explicit flashscope_queue(std::unique_ptr<flashscope::RequestQueue> q) : queue(std::move(q)) {}
  std::unique_ptr<flashscope::RequestQueue> queue;
  // flashscope_queue_set_penalties; submits on other threads read the pair.
  std::mutex penalties_mutex;
  float presence = 0.0f, frequency = 0.0f;
  // flashscope_queue_set_dry (same mutex): its dry_* fields, the library's default until set.
  flashscope::SamplingParams dry = flashscope::engine_sampling_defaults();
};

struct flashscope_session {
  flashscope::Session session;
  flashscope::ChatFormat format;
  flashscope::ChatFormat model_format;  // what format returns to when an override is cleared
  std::string system_prompt;            // with a template: added first when the history has no system message
  std::vector<flashscope::ChatMessage> history;
  size_t n_in_cache = 0;
  float presence = 0.0f, frequency = 0.0f;  // flashscope_session_set_penalties
  // flashscope_session_set_dry: its dry_* fields, the library's default
  // (engine_sampling_defaults, as the CLI, the server and the app) until set.
  flashscope::SamplingParams dry = flashscope::engine_sampling_defaults();
};

// One reply of a batch: generate()'s bookkeeping, kept across steps.
struct flashscope_batch_reply {
  flashscope_session* session = nullptr;
  flashscope_token_callback on_token = nullptr;
  flashscope_done_callback on_done = nullptr;
  void* user = nullptr;
  std::vector<int32_t> held_before;  // the session's tokens when the reply was queued
  int32_t feed = 0;                  // prompt tokens of the turn
  int32_t sampled = 0;
  std::string reply;                 // the text shown so far
  std::string text;                  // NUL-terminated copy for on_token
};

struct flashscope_batch {
  flashscope::BatchGenerator generator;
  // By the generator's reply id; a reply leaves when it is done. Pointers
  // are stable: the generator's token callbacks hold them.
  std::map<int, std::unique_ptr<flashscope_batch_reply>> replies;
};

namespace {

using flashscope::StatusCode;

#define FS_STR2(x) #x
#define FS_STR(x) FS_STR2(x)
constexpr const char* kVersionString =
    FS_STR(FLASHSCOPE_VERSION_MAJOR) "." FS_STR(FLASHSCOPE_VERSION_MINOR) "." FS_STR(FLASHSCOPE_VERSION_PATCH);

// --- errors and logging --------------------------------------------------------

thread_local std::string t_last_error;
// Points at t_last_error, or at a literal when the message itself could not
// be stored (no memory).
thread_local const char* t_last_error_ptr = "";

std::mutex g_log_mutex;
flashscope_log_callback g_log_fn = nullptr;
void* g_log_user = nullptr;

void log_message(flashscope_log_level level, const char* message) noexcept {
  flashscope_log_callback fn;
  void* user;
  {
    std::lock_guard<std::mutex> lock(g_log_mutex);
    fn = g_log_fn;
    user = g_log_user;
  }
  if (fn) fn(level, message, user);
}

// Records "fn: detail" as the thread's last error and logs it. Never throws.
flashscope_status fail(flashscope_status code, const char* fn, const char* detail,
                       flashscope_log_level level = FLASHSCOPE_LOG_ERROR) noexcept {
  try {
    t_last_error.assign(fn);
    t_last_error += ": ";
    t_last_error += detail;
    t_last_error_ptr = t_last_error.c_str();
  } catch (...) {
    t_last_error_ptr = "out of memory while recording an error message";
  }
  log_message(level, t_last_error_ptr);
  return code;
}

flashscope_status fail(flashscope_status code, const char* fn, const std::string& detail,
                       flashscope_log_level level = FLASHSCOPE_LOG_ERROR) noexcept {
  return fail(code, fn, detail.c_str(), level);
}

flashscope_status to_c(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return FLASHSCOPE_OK;
    case StatusCode::kInvalidArgument: return FLASHSCOPE_INVALID_ARGUMENT;
    case StatusCode::kUnsupported: return FLASHSCOPE_UNSUPPORTED;
    case StatusCode::kDeviceError: return FLASHSCOPE_DEVICE_ERROR;
    case StatusCode::kOutOfMemory: return FLASHSCOPE_OUT_OF_MEMORY;
    case StatusCode::kIoError: return FLASHSCOPE_IO_ERROR;
    case StatusCode::kCorruptData: return FLASHSCOPE_CORRUPT_DATA;
  }
  return FLASHSCOPE_DEVICE_ERROR;
}

flashscope_status fail(const char* fn, const flashscope::Status& s) noexcept {
  try {
    return fail(to_c(s.code()), fn, s.to_string());
  } catch (...) {
    return fail(FLASHSCOPE_OUT_OF_MEMORY, fn, "out of memory");
  }
}

template <typename F>
flashscope_status guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(FLASHSCOPE_OUT_OF_MEMORY, fn, "out of memory");
  } catch (const std::exception& e) {
    return fail(FLASHSCOPE_DEVICE_ERROR, fn, (std::string("internal error: ") + e.what()).c_str());
  } catch (...) {
    return fail(FLASHSCOPE_DEVICE_ERROR, fn, "internal error (unknown exception)");
  }
}

// The buffer rule of the header: the size needed always, the bytes only
// when they fit.
flashscope_status copy_out(const char* fn, const std::string& s, char* buf, size_t buf_size, size_t* out_size) {
  const size_t need = s.size() + 1;
  if (out_size) *out_size = need;
  if (!buf && buf_size > 0) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "buf is NULL but buf_size > 0");
  if (buf_size < need) {
    return fail(FLASHSCOPE_BUFFER_TOO_SMALL, fn,
                std::to_string(need) + " bytes needed, the buffer has " + std::to_string(buf_size));
  }
  std::memcpy(buf, s.c_str(), need);
  return FLASHSCOPE_OK;
}

// --- sessions ----------------------------------------------------------------------

bool valid_role(const char* role) {
  return std::strcmp(role, "system") == 0 || std::strcmp(role, "user") == 0 || std::strcmp(role, "assistant") == 0;
}

// A session's format: the model's template; where there is none or it does
// not parse, ChatML as before templates were rendered, with its default
// system prompt (system_prompt; NULL: the template's literal, else
// SmolLM2's; "": none).
flashscope::Result<flashscope::ChatFormat> model_chat_format(const flashscope::Model& model,
                                                             const char* system_prompt) {
  flashscope::ChatFormat format = flashscope::ChatFormat::for_model(model);
  if (format.kind() == flashscope::ChatFormatKind::kTemplate) return format;
  const flashscope::Tokenizer& tok = model.tokenizer();
  if (tok.token_id("<|im_start|>") < 0 || tok.token_id("<|im_end|>") < 0) {
    std::string why = "chat sessions need a chat template or ChatML, and this model's vocabulary has no "
                      "<|im_start|> / <|im_end|> tokens";
    if (!model.chat_template_status().ok()) why += " (" + model.chat_template_status().message() + ")";
    return flashscope::Status(flashscope::StatusCode::kUnsupported, why);
  }
  std::string system;
  if (system_prompt) {
    system = system_prompt;
  } else {
    system = flashscope::default_system_prompt_from_template(model.chat_template());
    if (system.empty()) system = flashscope::kSmolLMDefaultSystemPrompt;
  }
  return flashscope::ChatFormat::chatml(model, std::move(system));
}

// The messages the format renders: the history, after the session's
// system prompt when it has one of its own.
std::vector<flashscope::ChatMessage> rendered_messages(const flashscope_session& s) {
  std::vector<flashscope::ChatMessage> out;
  if (s.format.kind() == flashscope::ChatFormatKind::kTemplate && !s.system_prompt.empty() &&
      (s.history.empty() || s.history.front().role != "system")) {
    out.push_back({"system", s.system_prompt});
  }
  out.insert(out.end(), s.history.begin(), s.history.end());
  return out;
}

flashscope_stop_reason to_c(flashscope::StopReason r) {
  using flashscope::StopReason;
  switch (r) {
    case StopReason::kMaxTokens: return FLASHSCOPE_STOP_MAX_TOKENS;
    case StopReason::kStopToken: return FLASHSCOPE_STOP_TOKEN;
    case StopReason::kCallback: return FLASHSCOPE_STOP_CALLBACK;
    case StopReason::kContextFull: return FLASHSCOPE_STOP_CONTEXT_FULL;
    case StopReason::kStopString: return FLASHSCOPE_STOP_STRING;
    case StopReason::kCancelled: return FLASHSCOPE_STOP_CANCELLED;
  }
  return FLASHSCOPE_STOP_NONE;
}

void clear_stats(flashscope_generate_stats* st, int32_t n_tokens) {
  std::memset(st, 0, sizeof *st);
  st->stop_reason = FLASHSCOPE_STOP_NONE;
  st->stop_token = -1;
  st->stop_string = -1;
  st->n_tokens = n_tokens;
}

// flashscope_generate_params (NULL: the defaults) as GenerateParams; the
// stop strings' NULLs are refused here, the values by the engine's checks.
flashscope_status to_cpp(const char* fn, const flashscope_generate_params* params, flashscope::GenerateParams* gp) {
  const flashscope_generate_params p = params ? *params : flashscope_generate_default_params();
  gp->max_tokens = p.max_tokens;
  gp->sampling.temperature = p.temperature;
  gp->sampling.top_k = p.top_k;
  gp->sampling.top_p = p.top_p;
  gp->sampling.min_p = p.min_p;
  gp->sampling.repetition_penalty = p.repetition_penalty;
  gp->sampling.repeat_last_n = p.repeat_last_n;
  gp->sampling.seed = p.seed;
  if (p.n_stop_strings > 0 && !p.stop_strings) {
    return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "stop_strings is NULL but n_stop_strings > 0");
  }
  for (size_t i = 0; i < p.n_stop_strings; ++i) {
    if (!p.stop_strings[i]) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "stop_strings[" + std::to_string(i) + "] is NULL");
    }
    gp->stop_strings.emplace_back(p.stop_strings[i]);
  }
  return FLASHSCOPE_OK;
}

// GenerateStats as the C struct (n_tokens: the queue's sessions are reset
// after each request, so it is what the request held: prompt + reply).
void to_c_stats(const flashscope::GenerateStats& g, flashscope_generate_stats* st) {
  clear_stats(st, 0);
  st->prompt_tokens = g.prompt_tokens;
  st->generated_tokens = g.generated_tokens;
  st->stop_reason = to_c(g.stop_reason);
  st->stop_token = g.stop_token;
  st->stop_string = g.stop_string;
  st->n_tokens = g.prompt_tokens + g.generated_tokens;
  st->prefill_ms = g.prefill_ms;
  st->ttft_ms = g.ttft_ms;
  st->decode_ms = g.decode_ms;
  st->prefill_tokens_per_s = g.prefill_tokens_per_s;
  st->decode_tokens_per_s = g.decode_tokens_per_s;
}

// The DRY fields (flashscope_session_set_dry, flashscope_queue_set_dry).
void copy_dry(const flashscope::SamplingParams& from, flashscope::SamplingParams* to) {
  to->dry_multiplier = from.dry_multiplier;
  to->dry_base = from.dry_base;
  to->dry_allowed_length = from.dry_allowed_length;
  to->dry_last_n = from.dry_last_n;
}

// DRY's arguments as flashscope_session_set_dry checks them.
flashscope_status check_dry(const char* fn, float multiplier, float base, int32_t allowed_length) {
  if (!(multiplier >= 0.0f && std::isfinite(multiplier))) {
    return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "multiplier must be finite and >= 0");
  }
  if (!(base >= 1.0f && std::isfinite(base))) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "base must be finite and >= 1");
  if (allowed_length < 1) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "allowed_length must be >= 1");
  return FLASHSCOPE_OK;
}

// What generate and batch_add check before a reply starts, and the turn it
// feeds (what the cache lacks of the rendered history); *st says
// CONTEXT_FULL when the new messages do not fit. Nothing changes here.
flashscope_status begin_turn(const char* fn, flashscope_session* s, const flashscope_generate_params* params,
                             flashscope::GenerateParams* gp, flashscope::ChatTurn* turn, flashscope_generate_stats* st) {
  if (!s) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
  if (const flashscope_status c = to_cpp(fn, params, gp); c != FLASHSCOPE_OK) return c;
  gp->sampling.presence_penalty = s->presence;
  gp->sampling.frequency_penalty = s->frequency;
  copy_dry(s->dry, &gp->sampling);
  for (std::string& stop : s->format.stop_strings()) gp->stop_strings.push_back(std::move(stop));
  if (s->n_in_cache == s->history.size()) {
    return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                s->history.empty() ? "no message: add one with flashscope_session_add_message first"
                                   : "no message since the last reply: add one with flashscope_session_add_message");
  }
  auto next = s->format.next_turn(s->session.tokens(), rendered_messages(*s));
  if (!next.ok()) return fail(fn, next.status());
  *turn = std::move(next).value();
  const int keep = turn->keep;
  const int feed = static_cast<int>(turn->feed.size());
  if (keep + feed > s->session.capacity()) {
    st->stop_reason = FLASHSCOPE_STOP_CONTEXT_FULL;
    return fail(FLASHSCOPE_CONTEXT_FULL, fn,
                "the new messages need " + std::to_string(feed) + " tokens and the session has " +
                    std::to_string(s->session.capacity() - keep) + " of " +
                    std::to_string(s->session.capacity()) + " left; nothing changed",
                FLASHSCOPE_LOG_INFO);
  }
  return FLASHSCOPE_OK;
}

flashscope_status generate(flashscope_session* s, const flashscope_generate_params* params,
                           flashscope_token_callback callback, void* user, flashscope_generate_stats* out_stats) {
  constexpr const char* fn = "session_generate";
  flashscope_generate_stats local_stats;
  flashscope_generate_stats* st = out_stats ? out_stats : &local_stats;
  clear_stats(st, s ? s->session.n_tokens() : 0);
  flashscope::GenerateParams gp;
  flashscope::ChatTurn turn;
  if (const flashscope_status c = begin_turn(fn, s, params, &gp, &turn, st); c != FLASHSCOPE_OK) return c;
  const std::vector<int32_t>& prompt = turn.feed;
  const int keep = turn.keep;
  const int feed = static_cast<int>(prompt.size());

  std::string reply;
  int32_t sampled = 0;
  std::string text;  // NUL-terminated copy for the callback
  auto on_token = [&](const flashscope::TokenEvent& e) {
    reply.append(e.text.data(), e.text.size());
    if (e.token >= 0) ++sampled;
    if (!callback) return true;
    text.assign(e.text.data(), e.text.size());
    return callback(text.c_str(), text.size(), e.token, user) != 0;
  };
  // Keeps history and cache in step whatever happened after the prefill:
  // the queued messages are in the cache and `reply` is what was shown.
  const std::vector<int32_t> held_before = s->session.tokens();
  auto commit = [&]() {
    if (s->session.tokens() == held_before) return false;  // the prefill did not happen
    s->history.push_back({"assistant", reply});
    s->n_in_cache = s->history.size();
    return true;
  };

  flashscope::Result<flashscope::GenerateStats> r = flashscope::Status();
  try {
    r = s->session.generate(keep, prompt, gp, on_token);
  } catch (...) {
    commit();
    throw;
  }
  if (!r.ok()) {
    if (commit()) {
      st->prompt_tokens = feed;
      st->generated_tokens = sampled;
      st->n_tokens = s->session.n_tokens();
    }
    return fail(fn, r.status());
  }
  const flashscope::GenerateStats& g = *r;
  commit();
  st->prompt_tokens = g.prompt_tokens;
  st->generated_tokens = g.generated_tokens;
  st->stop_reason = to_c(g.stop_reason);
  st->stop_token = g.stop_token;
  st->stop_string = g.stop_string;
  st->n_tokens = s->session.n_tokens();
  st->prefill_ms = g.prefill_ms;
  st->ttft_ms = g.ttft_ms;
  st->decode_ms = g.decode_ms;
  st->prefill_tokens_per_s = g.prefill_tokens_per_s;
  st->decode_tokens_per_s = g.decode_tokens_per_s;

  char line[192];
  std::snprintf(line, sizeof line, "generate: %d prompt tokens in %.1f ms, %d tokens at %.1f tokens/s, stop: %s",
                g.prompt_tokens, g.prefill_ms, g.generated_tokens, g.decode_tokens_per_s,
                flashscope::stop_reason_name(g.stop_reason));
  log_message(FLASHSCOPE_LOG_DEBUG, line);
  if (g.stop_reason == flashscope::StopReason::kCancelled) {
    return fail(FLASHSCOPE_CANCELLED, fn,
                "cancelled after " + std::to_string(g.generated_tokens) + " tokens; the reply so far is kept",
                FLASHSCOPE_LOG_INFO);
  }
  if (g.stop_reason == flashscope::StopReason::kContextFull) {
    return fail(FLASHSCOPE_CONTEXT_FULL, fn,
                "the session is full (" + std::to_string(s->session.capacity()) +
                    " tokens) after " + std::to_string(g.generated_tokens) + " tokens; the reply so far is kept",
                FLASHSCOPE_LOG_INFO);
  }
  return FLASHSCOPE_OK;
}

}  // namespace

extern "C" {

const char* flashscope_version(void) { return kVersionString; }

const char* flashscope_status_name(flashscope_status status) {
  switch (status) {
    case FLASHSCOPE_OK: return "ok";
    case FLASHSCOPE_INVALID_ARGUMENT: return "invalid_argument";
    case FLASHSCOPE_UNSUPPORTED: return "unsupported";
    case FLASHSCOPE_DEVICE_ERROR: return "device_error";
    case FLASHSCOPE_OUT_OF_MEMORY: return "out_of_memory";
    case FLASHSCOPE_IO_ERROR: return "io_error";
    case FLASHSCOPE_CORRUPT_DATA: return "corrupt_data";
    case FLASHSCOPE_CANCELLED: return "cancelled";
    case FLASHSCOPE_CONTEXT_FULL: return "context_full";
    case FLASHSCOPE_BUFFER_TOO_SMALL: return "buffer_too_small";
  }
  return "unknown";
}

const char* flashscope_last_error(void) { return t_last_error_ptr; }

flashscope_status flashscope_check_version(int32_t major, int32_t minor) {
  const bool ok = major == FLASHSCOPE_VERSION_MAJOR &&
                  (major == 0 ? minor == FLASHSCOPE_VERSION_MINOR : minor >= 0 && minor <= FLASHSCOPE_VERSION_MINOR);
  if (ok) return FLASHSCOPE_OK;
  char detail[160];
  std::snprintf(detail, sizeof detail,
                "the program was built for FlashScope %d.%d and this library is %s (%s)", static_cast<int>(major),
                static_cast<int>(minor), kVersionString,
                FLASHSCOPE_VERSION_MAJOR == 0 ? "before 1.0 only the same major.minor is compatible"
                                              : "the same major and a minor up to the library's are compatible");
  return fail(FLASHSCOPE_UNSUPPORTED, "check_version", detail);
}

void flashscope_set_log_callback(flashscope_log_callback callback, void* user) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_log_fn = callback;
  g_log_user = user;
}

// --- model ---------------------------------------------------------------------

flashscope_model_params flashscope_model_default_params(void) {
  flashscope_model_params p;
  p.device = FLASHSCOPE_DEVICE_CPU;
  p.n_threads = 0;
  return p;
}

flashscope_status flashscope_model_load(const char* path, const flashscope_model_params* params,
                                        flashscope_model** out_model) {
  return flashscope_model_load_weights(path, params, FLASHSCOPE_WEIGHTS_AUTO, out_model);
}

flashscope_status flashscope_model_load_weights(const char* path, const flashscope_model_params* params,
                                                int32_t weights, flashscope_model** out_model) {
  return flashscope_model_load_kv(path, params, weights, FLASHSCOPE_KV_BF16, out_model);
}

flashscope_status flashscope_model_load_kv(const char* path, const flashscope_model_params* params, int32_t weights,
                                           int32_t kv_type, flashscope_model** out_model) {
  constexpr const char* fn = "model_load";
  if (out_model) *out_model = nullptr;
  return guarded(fn, [&]() -> flashscope_status {
    if (!path) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "path is NULL");
    if (!out_model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "out_model is NULL");
    const flashscope_model_params p = params ? *params : flashscope_model_default_params();
    flashscope::ModelOptions options;
    switch (p.device) {
      case FLASHSCOPE_DEVICE_CPU: options.device = flashscope::Device::kCpu; break;
      case FLASHSCOPE_DEVICE_CUDA: options.device = flashscope::Device::kCuda; break;
      default:
        return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                    "unknown device " + std::to_string(p.device) + " (FLASHSCOPE_DEVICE_CPU or _CUDA)");
    }
    static_assert(FLASHSCOPE_MAX_THREADS == flashscope::kMaxThreads, "one bound for both APIs");
    if (p.n_threads < 0 || p.n_threads > FLASHSCOPE_MAX_THREADS) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                  "n_threads = " + std::to_string(p.n_threads) + " (0: auto, at most " +
                      std::to_string(FLASHSCOPE_MAX_THREADS) + ")");
    }
    options.threads = p.n_threads;
    switch (weights) {
      case FLASHSCOPE_WEIGHTS_QUANTIZED: options.weights = flashscope::WeightFormat::kQuantized; break;
      case FLASHSCOPE_WEIGHTS_BF16: options.weights = flashscope::WeightFormat::kBf16; break;
      case FLASHSCOPE_WEIGHTS_AUTO: options.weights = flashscope::WeightFormat::kAuto; break;
      default:
        return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                    "unknown weight format " + std::to_string(weights) +
                        " (FLASHSCOPE_WEIGHTS_QUANTIZED, _BF16 or _AUTO)");
    }
    switch (kv_type) {
      case FLASHSCOPE_KV_BF16: options.kv_type = flashscope::KvType::kBF16; break;
      case FLASHSCOPE_KV_Q8_0: options.kv_type = flashscope::KvType::kQ8_0; break;
      case FLASHSCOPE_KV_Q4_0: options.kv_type = flashscope::KvType::kQ4_0; break;
      default:
        return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                    "unknown KV cache type " + std::to_string(kv_type) + " (FLASHSCOPE_KV_BF16, _Q8_0 or _Q4_0)");
    }
    auto model = flashscope::Model::load(path, options);
    if (!model.ok()) return fail(fn, model.status());
    auto handle = std::make_unique<flashscope_model>();
    handle->model = std::move(model).value();
    const flashscope::ModelConfig& c = handle->model.config();
    char line[256];
    const std::string name = c.name.empty() ? std::string(path) : flashscope::printable(c.name, 100);  // from the file
    std::snprintf(line, sizeof line, "loaded %s: %d layers, vocabulary %d, context %d, %.0f MB of weights",
                  name.c_str(), c.n_layers, c.vocab, c.context_length,
                  static_cast<double>(handle->model.weight_bytes()) / 1e6);
    log_message(FLASHSCOPE_LOG_INFO, line);
    *out_model = handle.release();
    return FLASHSCOPE_OK;
  });
}

void flashscope_model_free(flashscope_model* model) { delete model; }

int32_t flashscope_model_n_ctx(const flashscope_model* model) {
  return model ? model->model.config().context_length : 0;
}
int32_t flashscope_model_n_vocab(const flashscope_model* model) { return model ? model->model.config().vocab : 0; }
int32_t flashscope_model_n_layers(const flashscope_model* model) {
  return model ? model->model.config().n_layers : 0;
}
uint64_t flashscope_model_size(const flashscope_model* model) { return model ? model->model.weight_bytes() : 0; }
uint64_t flashscope_model_device_size(const flashscope_model* model) {
  return model ? model->model.device_weight_bytes() : 0;
}

flashscope_status flashscope_model_name(const flashscope_model* model, char* buf, size_t buf_size,
                                        size_t* out_size) {
  constexpr const char* fn = "model_name";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model is NULL");
    return copy_out(fn, model->model.config().name, buf, buf_size, out_size);
  });
}

// --- session ---------------------------------------------------------------------

flashscope_session_params flashscope_session_default_params(void) {
  flashscope_session_params p;
  p.n_ctx = 0;
  p.system_prompt = nullptr;
  return p;
}

flashscope_status flashscope_session_create(const flashscope_model* model, const flashscope_session_params* params,
                                            flashscope_session** out_session) {
  constexpr const char* fn = "session_create";
  if (out_session) *out_session = nullptr;
  return guarded(fn, [&]() -> flashscope_status {
    if (!model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model is NULL");
    if (!out_session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "out_session is NULL");
    const flashscope_session_params p = params ? *params : flashscope_session_default_params();
    if (p.n_ctx < 0) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "n_ctx must be >= 0 (0: the model's context)");
    auto format = model_chat_format(model->model, p.system_prompt);
    if (!format.ok()) return fail(fn, format.status());
    flashscope::SessionOptions so;
    so.max_tokens = p.n_ctx;
    auto session = flashscope::Session::create(model->model, so);
    if (!session.ok()) return fail(fn, session.status());
    auto handle = std::make_unique<flashscope_session>();
    handle->session = std::move(session).value();
    handle->format = *format;
    handle->model_format = std::move(format).value();
    if (p.system_prompt) handle->system_prompt = p.system_prompt;
    *out_session = handle.release();
    return FLASHSCOPE_OK;
  });
}

void flashscope_session_free(flashscope_session* session) { delete session; }

flashscope_status flashscope_session_add_message(flashscope_session* session, const char* role,
                                                 const char* content) {
  constexpr const char* fn = "session_add_message";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    if (!role) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "role is NULL");
    if (!content) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "content is NULL");
    if (!valid_role(role)) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                  std::string("role \"") + role + "\" is not one of \"system\", \"user\", \"assistant\"");
    }
    session->history.push_back({role, content});
    return FLASHSCOPE_OK;
  });
}

flashscope_generate_params flashscope_generate_default_params(void) {
  const flashscope::GenerateParams d;
  flashscope_generate_params p;
  p.max_tokens = d.max_tokens;
  p.temperature = d.sampling.temperature;
  p.top_k = d.sampling.top_k;
  p.top_p = d.sampling.top_p;
  p.min_p = d.sampling.min_p;
  p.repetition_penalty = d.sampling.repetition_penalty;
  p.repeat_last_n = d.sampling.repeat_last_n;
  p.seed = d.sampling.seed;
  p.stop_strings = nullptr;
  p.n_stop_strings = 0;
  return p;
}

flashscope_status flashscope_model_sampling_defaults(const flashscope_model* model, flashscope_generate_params* params) {
  constexpr const char* fn = "model_sampling_defaults";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model || !params) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model or params is NULL");
    const flashscope::SamplingDefaults& d = model->model.sampling_defaults();
    const flashscope::SamplingParams& p = d.params;
    for (const std::string& f : d.fields) {
      if (f == "temperature") params->temperature = p.temperature;
      if (f == "top_k") params->top_k = p.top_k;
      if (f == "top_p") params->top_p = p.top_p;
      if (f == "min_p") params->min_p = p.min_p;
      if (f == "repetition_penalty") params->repetition_penalty = p.repetition_penalty;
      if (f == "repeat_last_n") params->repeat_last_n = p.repeat_last_n;
    }
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_model_default_generate_params(const flashscope_model* model,
                                                          flashscope_generate_params* params) {
  constexpr const char* fn = "model_default_generate_params";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model || !params) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model or params is NULL");
    flashscope_generate_params p = flashscope_generate_default_params();
    const flashscope::SamplingParams d = flashscope::default_sampling(model->model.sampling_defaults());
    p.temperature = d.temperature;
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repetition_penalty = d.repetition_penalty;
    p.repeat_last_n = d.repeat_last_n;
    *params = p;
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_model_sampling_source(const flashscope_model* model, char* buf, size_t buf_size,
                                                   size_t* out_size) {
  constexpr const char* fn = "model_sampling_source";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model is NULL");
    return copy_out(fn, model->model.sampling_defaults().source, buf, buf_size, out_size);
  });
}

flashscope_status flashscope_session_generate(flashscope_session* session, const flashscope_generate_params* params,
                                              flashscope_token_callback callback, void* user,
                                              flashscope_generate_stats* out_stats) {
  return guarded("session_generate", [&] { return generate(session, params, callback, user, out_stats); });
}

void flashscope_session_cancel(flashscope_session* session) {
  if (session) session->session.cancel();
}

void flashscope_session_reset(flashscope_session* session) {
  if (!session) return;
  session->session.reset();
  session->history.clear();  // clear() keeps the capacity: no allocation, nothing to throw
  session->n_in_cache = 0;
}

int32_t flashscope_session_n_tokens(const flashscope_session* session) {
  return session ? session->session.n_tokens() : 0;
}
int32_t flashscope_session_n_ctx(const flashscope_session* session) {
  return session ? session->session.capacity() : 0;
}
int32_t flashscope_session_n_messages(const flashscope_session* session) {
  return session ? static_cast<int32_t>(session->history.size()) : 0;
}

flashscope_status flashscope_session_message(const flashscope_session* session, int32_t index, char* role_buf,
                                             size_t role_buf_size, size_t* out_role_size, char* content_buf,
                                             size_t content_buf_size, size_t* out_content_size) {
  constexpr const char* fn = "session_message";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    if (index < 0 || static_cast<size_t>(index) >= session->history.size()) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn,
                  "index " + std::to_string(index) + " outside [0, " + std::to_string(session->history.size()) + ")");
    }
    const flashscope::ChatMessage& m = session->history[static_cast<size_t>(index)];
    const size_t role_need = m.role.size() + 1;
    const size_t content_need = m.content.size() + 1;
    if (out_role_size) *out_role_size = role_need;
    if (out_content_size) *out_content_size = content_need;
    if ((!role_buf && role_buf_size > 0) || (!content_buf && content_buf_size > 0)) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "a buffer is NULL but its size > 0");
    }
    // Both or neither: a caller sizing one buffer at a time (NULL, 0) skips
    // the other; a buffer given too small fails the whole call.
    const bool role_wanted = role_buf_size > 0;
    const bool content_wanted = content_buf_size > 0;
    if ((role_wanted && role_buf_size < role_need) || (content_wanted && content_buf_size < content_need)) {
      return fail(FLASHSCOPE_BUFFER_TOO_SMALL, fn,
                  "role needs " + std::to_string(role_need) + " bytes (buffer " + std::to_string(role_buf_size) +
                      "), content " + std::to_string(content_need) + " (buffer " + std::to_string(content_buf_size) +
                      ")");
    }
    if (role_wanted) std::memcpy(role_buf, m.role.c_str(), role_need);
    if (content_wanted) std::memcpy(content_buf, m.content.c_str(), content_need);
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_model_chat_template(const flashscope_model* model, char* buf, size_t buf_size,
                                                size_t* out_size) {
  constexpr const char* fn = "model_chat_template";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model is NULL");
    return copy_out(fn, model->model.chat_template(), buf, buf_size, out_size);
  });
}

flashscope_status flashscope_model_chat_template_error(const flashscope_model* model, char* buf, size_t buf_size,
                                                      size_t* out_size) {
  constexpr const char* fn = "model_chat_template_error";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model is NULL");
    const flashscope::Status& st = model->model.chat_template_status();
    return copy_out(fn, st.ok() ? std::string() : st.message(), buf, buf_size, out_size);
  });
}

flashscope_status flashscope_session_set_chat_template(flashscope_session* session, const char* template_text) {
  constexpr const char* fn = "session_set_chat_template";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    if (!template_text || !*template_text) {
      session->format = session->model_format;
      return FLASHSCOPE_OK;
    }
    flashscope::ChatFormat format = flashscope::ChatFormat::for_model(session->session.model(), template_text);
    if (format.kind() != flashscope::ChatFormatKind::kTemplate) return fail(fn, format.template_status());
    session->format = std::move(format);
    return FLASHSCOPE_OK;
  });
}

namespace {

// The range OpenAI documents for both penalties.
bool penalty_in_range(float v) { return v >= -2.0f && v <= 2.0f; }

}  // namespace

flashscope_status flashscope_session_set_penalties(flashscope_session* session, float presence, float frequency) {
  constexpr const char* fn = "session_set_penalties";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    if (!penalty_in_range(presence)) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "presence must be in [-2, 2]");
    if (!penalty_in_range(frequency)) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "frequency must be in [-2, 2]");
    session->presence = presence;
    session->frequency = frequency;
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_session_set_dry(flashscope_session* session, float multiplier, float base,
                                             int32_t allowed_length, int32_t last_n) {
  constexpr const char* fn = "session_set_dry";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    if (const flashscope_status c = check_dry(fn, multiplier, base, allowed_length); c != FLASHSCOPE_OK) return c;
    session->dry.dry_multiplier = multiplier;
    session->dry.dry_base = base;
    session->dry.dry_allowed_length = allowed_length;
    session->dry.dry_last_n = last_n;
    return FLASHSCOPE_OK;
  });
}

// --- the model's own attention ---------------------------------------------------------

flashscope_status flashscope_session_arm_attention_capture(flashscope_session* session, int32_t layer) {
  constexpr const char* fn = "session_arm_attention_capture";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    const flashscope::Status s = flashscope::arm_attention_capture(session->session, layer);
    return s.ok() ? FLASHSCOPE_OK : fail(fn, s);
  });
}

flashscope_status flashscope_session_capture_attention(flashscope_session* session, int32_t layer, int32_t head,
                                                       const char* trace_path, flashscope_head_summary* out_summary) {
  constexpr const char* fn = "session_capture_attention";
  return guarded(fn, [&]() -> flashscope_status {
    if (!session) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "session is NULL");
    flashscope::AttentionCaptureRequest req;
    req.layer = layer;
    req.heads = {head};
    auto cap = flashscope::capture_attention(session->session, req);
    if (!cap.ok()) return fail(fn, cap.status());
    flashscope::HeadCapture& h = cap->heads[0];
    if (trace_path != nullptr) {
      h.trace.meta.producer = "flashscope C ABI";
      const flashscope::Status w = flashscope::write_trace(h.trace, trace_path);
      if (!w.ok()) return fail(fn, w);
    }
    if (out_summary != nullptr) {
      const flashscope::HeadSummary& s = h.summary;
      *out_summary = {s.head, s.rows, s.entropy, s.first_token_mass, s.previous_token_mass, s.self_mass,
                      s.window_mass};
    }
    return FLASHSCOPE_OK;
  });
}

// --- request queue ---------------------------------------------------------------------

flashscope_queue_params flashscope_queue_default_params(void) {
  flashscope_queue_params p;
  p.parallel = 4;
  p.max_queued = 16;
  p.n_ctx = 0;
  return p;
}

flashscope_status flashscope_queue_create(const flashscope_model* model, const flashscope_queue_params* params,
                                          flashscope_queue** out_queue) {
  constexpr const char* fn = "queue_create";
  if (out_queue) *out_queue = nullptr;
  return guarded(fn, [&]() -> flashscope_status {
    if (!model || !out_queue) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model or out_queue is NULL");
    const flashscope_queue_params p = params ? *params : flashscope_queue_default_params();
    flashscope::RequestQueueOptions o;
    o.parallel = p.parallel;
    o.max_queued = p.max_queued;
    o.session_tokens = p.n_ctx;
    auto q = flashscope::RequestQueue::create(model->model, o);
    if (!q.ok()) return fail(fn, q.status());
    *out_queue = new flashscope_queue(std::move(q).value());
    return FLASHSCOPE_OK;
  });
}

void flashscope_queue_free(flashscope_queue* queue) { delete queue; }

flashscope_status flashscope_queue_submit(flashscope_queue* queue, const int32_t* tokens, size_t n_tokens,
                                          const flashscope_generate_params* params,
                                          flashscope_token_callback on_token, flashscope_done_callback on_done,
                                          void* user, uint64_t* out_id) {
  constexpr const char* fn = "queue_submit";
  return guarded(fn, [&]() -> flashscope_status {
    if (!queue || !tokens || n_tokens == 0) {
      return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "queue or tokens is NULL, or n_tokens is 0");
    }
    flashscope::GenerateParams gp;
    if (const flashscope_status c = to_cpp(fn, params, &gp); c != FLASHSCOPE_OK) return c;
    {
      std::lock_guard<std::mutex> lock(queue->penalties_mutex);
      gp.sampling.presence_penalty = queue->presence;
      gp.sampling.frequency_penalty = queue->frequency;
      copy_dry(queue->dry, &gp.sampling);
    }
    flashscope::TokenCallback token_cb;
    if (on_token) {
      token_cb = [on_token, user, text = std::string()](const flashscope::TokenEvent& e) mutable {
        text.assign(e.text.data(), e.text.size());  // NUL-terminated for C
        return on_token(text.c_str(), text.size(), e.token, user) != 0;
      };
    }
    flashscope::DoneCallback done_cb;
    if (on_done) {
      done_cb = [on_done, user](const flashscope::Result<flashscope::GenerateStats>& r) {
        flashscope_generate_stats st;
        clear_stats(&st, 0);
        flashscope_status code = FLASHSCOPE_OK;
        if (!r.ok()) {
          code = to_c(r.status().code());
        } else {
          to_c_stats(r.value(), &st);
          if (r.value().stop_reason == flashscope::StopReason::kCancelled) code = FLASHSCOPE_CANCELLED;
          if (r.value().stop_reason == flashscope::StopReason::kContextFull) code = FLASHSCOPE_CONTEXT_FULL;
        }
        on_done(code, &st, user);
      };
    }
    auto id = queue->queue->submit(std::vector<int32_t>(tokens, tokens + n_tokens), gp, std::move(token_cb),
                                   std::move(done_cb));
    if (!id.ok()) return fail(fn, id.status());
    if (out_id) *out_id = id.value();
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_queue_set_penalties(flashscope_queue* queue, float presence, float frequency) {
  constexpr const char* fn = "queue_set_penalties";
  return guarded(fn, [&]() -> flashscope_status {
    if (!queue) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "queue is NULL");
    if (!penalty_in_range(presence)) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "presence must be in [-2, 2]");
    if (!penalty_in_range(frequency)) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "frequency must be in [-2, 2]");
    std::lock_guard<std::mutex> lock(queue->penalties_mutex);
    queue->presence = presence;
    queue->frequency = frequency;
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_queue_set_dry(flashscope_queue* queue, float multiplier, float base,
                                           int32_t allowed_length, int32_t last_n) {
  constexpr const char* fn = "queue_set_dry";
  return guarded(fn, [&]() -> flashscope_status {
    if (!queue) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "queue is NULL");
    if (const flashscope_status c = check_dry(fn, multiplier, base, allowed_length); c != FLASHSCOPE_OK) return c;
    std::lock_guard<std::mutex> lock(queue->penalties_mutex);
    queue->dry.dry_multiplier = multiplier;
    queue->dry.dry_base = base;
    queue->dry.dry_allowed_length = allowed_length;
    queue->dry.dry_last_n = last_n;
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_queue_cancel(flashscope_queue* queue, uint64_t id) {
  constexpr const char* fn = "queue_cancel";
  if (!queue) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "queue is NULL");
  if (!queue->queue->cancel(id)) {
    return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "no request " + std::to_string(id) + " waits or runs",
                FLASHSCOPE_LOG_INFO);
  }
  return FLASHSCOPE_OK;
}

int32_t flashscope_queue_n_waiting(const flashscope_queue* queue) {
  return queue ? queue->queue->stats().queued : 0;
}

int32_t flashscope_queue_n_running(const flashscope_queue* queue) {
  return queue ? queue->queue->stats().running : 0;
}

flashscope_status flashscope_model_tokenize(const flashscope_model* model, const char* text, int32_t parse_special,
                                            int32_t* tokens, size_t max_tokens, size_t* out_n) {
  constexpr const char* fn = "model_tokenize";
  return guarded(fn, [&]() -> flashscope_status {
    if (!model || !text) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "model or text is NULL");
    if (!tokens && max_tokens > 0) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "tokens is NULL but max_tokens > 0");
    const std::vector<int32_t> ids = model->model.tokenizer().encode(text, parse_special != 0);
    if (out_n) *out_n = ids.size();
    if (max_tokens < ids.size()) {
      return fail(FLASHSCOPE_BUFFER_TOO_SMALL, fn,
                  std::to_string(ids.size()) + " tokens, the buffer has room for " + std::to_string(max_tokens));
    }
    if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
    return FLASHSCOPE_OK;
  });
}

// --- batched generation --------------------------------------------------------------

namespace {

// The reply's text joins its session's history when the prefill ran (its
// messages are in the cache then); false when it did not.
bool commit_reply(flashscope_batch_reply& r) {
  flashscope_session& s = *r.session;
  if (s.session.tokens() == r.held_before) return false;
  s.history.push_back({"assistant", r.reply});
  s.n_in_cache = s.history.size();
  return true;
}

// A finished reply: history, stats and status as generate() leaves them.
flashscope_status finish_reply(flashscope_batch_reply& r, const flashscope::Result<flashscope::GenerateStats>& result,
                               flashscope_generate_stats* st) {
  constexpr const char* fn = "batch_step";
  const bool prefilled = commit_reply(r);
  clear_stats(st, r.session->session.n_tokens());
  if (!result.ok()) {
    if (prefilled) {
      st->prompt_tokens = r.feed;
      st->generated_tokens = r.sampled;
    }
    return fail(fn, result.status());
  }
  to_c_stats(result.value(), st);
  st->n_tokens = r.session->session.n_tokens();
  if (result->stop_reason == flashscope::StopReason::kCancelled) return FLASHSCOPE_CANCELLED;
  if (result->stop_reason == flashscope::StopReason::kContextFull) return FLASHSCOPE_CONTEXT_FULL;
  return FLASHSCOPE_OK;
}

}  // namespace

flashscope_status flashscope_batch_create(flashscope_batch** out_batch) {
  constexpr const char* fn = "batch_create";
  if (out_batch) *out_batch = nullptr;
  return guarded(fn, [&]() -> flashscope_status {
    if (!out_batch) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "out_batch is NULL");
    *out_batch = new flashscope_batch();
    return FLASHSCOPE_OK;
  });
}

void flashscope_batch_free(flashscope_batch* batch) {
  if (!batch) return;
  try {
    for (auto& [id, r] : batch->replies) commit_reply(*r);
  } catch (...) {
    // No memory for a history entry: that session's next turn re-renders
    // and prefills what the cache lacks (next_turn keeps the common prefix).
  }
  delete batch;
}

flashscope_status flashscope_batch_add(flashscope_batch* batch, flashscope_session* session,
                                       const flashscope_generate_params* params, flashscope_token_callback on_token,
                                       flashscope_done_callback on_done, void* user, uint64_t* out_id) {
  constexpr const char* fn = "batch_add";
  return guarded(fn, [&]() -> flashscope_status {
    if (!batch) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "batch is NULL");
    flashscope_generate_stats st;
    clear_stats(&st, 0);
    flashscope::GenerateParams gp;
    flashscope::ChatTurn turn;
    if (const flashscope_status c = begin_turn(fn, session, params, &gp, &turn, &st); c != FLASHSCOPE_OK) return c;
    // The cache keeps the common prefix of the old and new rendering. If
    // add refuses after this, only cache work is lost: the history is
    // unchanged and the next turn prefills what the cache lacks.
    if (turn.keep < session->session.n_tokens()) {
      const flashscope::Status cut = session->session.truncate(turn.keep);
      if (!cut.ok()) return fail(fn, cut);
    }
    auto r = std::make_unique<flashscope_batch_reply>();
    r->session = session;
    r->on_token = on_token;
    r->on_done = on_done;
    r->user = user;
    r->held_before = session->session.tokens();
    r->feed = static_cast<int32_t>(turn.feed.size());
    flashscope_batch_reply* rp = r.get();
    auto token_cb = [rp](const flashscope::TokenEvent& e) {
      rp->reply.append(e.text.data(), e.text.size());
      if (e.token >= 0) ++rp->sampled;
      if (!rp->on_token) return true;
      rp->text.assign(e.text.data(), e.text.size());
      return rp->on_token(rp->text.c_str(), rp->text.size(), e.token, rp->user) != 0;
    };
    auto id = batch->generator.add(session->session, turn.feed, gp, token_cb);
    if (!id.ok()) return fail(fn, id.status());
    batch->replies.emplace(id.value(), std::move(r));
    if (out_id) *out_id = static_cast<uint64_t>(id.value());
    return FLASHSCOPE_OK;
  });
}

flashscope_status flashscope_batch_step(flashscope_batch* batch) {
  constexpr const char* fn = "batch_step";
  return guarded(fn, [&]() -> flashscope_status {
    if (!batch) return fail(FLASHSCOPE_INVALID_ARGUMENT, fn, "batch is NULL");
    const flashscope::Status stepped = batch->generator.step();
    // The replies that ended leave the batch before their done callbacks,
    // which may add replies (to the map) for the next step.
    std::vector<std::pair<int, std::unique_ptr<flashscope_batch_reply>>> done;
    for (auto it = batch->replies.begin(); it != batch->replies.end();) {
      if (batch->generator.finished(it->first)) {
        done.emplace_back(it->first, std::move(it->second));
        it = batch->replies.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [id, r] : done) {
      flashscope_generate_stats st;
      const flashscope_status code = finish_reply(*r, batch->generator.result(id), &st);
      batch->generator.release(id);
      if (r->on_done) r->on_done(code, &st, r->user);
    }
    return stepped.ok() ? FLASHSCOPE_OK : fail(fn, stepped);
  });
}

int32_t flashscope_batch_n_running(const flashscope_batch* batch) {
  return batch ? static_cast<int32_t>(batch->replies.size()) : 0;
}

}  // extern "C"

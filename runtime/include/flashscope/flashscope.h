/* FlashScope's C ABI: load a model, hold chat sessions, stream replies.
 *
 *   if (flashscope_check_version(FLASHSCOPE_VERSION_MAJOR, FLASHSCOPE_VERSION_MINOR) != FLASHSCOPE_OK)
 *     fail(flashscope_last_error());
 *   flashscope_model* model = NULL;
 *   flashscope_model_params mp = flashscope_model_default_params();
 *   if (flashscope_model_load("SmolLM2-135M-Instruct.Q4_1.gguf", &mp, &model) != FLASHSCOPE_OK)
 *     fail(flashscope_last_error());         // "io error: cannot open ...: No such file or directory"
 *   flashscope_session* s = NULL;
 *   flashscope_session_create(model, NULL, &s);
 *   flashscope_session_add_message(s, "user", "Hi!");
 *   flashscope_generate_params gp = flashscope_generate_default_params();
 *   gp.max_tokens = 128;
 *   flashscope_session_generate(s, &gp, print_token, NULL, NULL);   // the reply joins the history
 *   flashscope_session_add_message(s, "user", "And then?");         // only this turn is prefilled next
 *   flashscope_session_generate(s, &gp, print_token, NULL, NULL);
 *   flashscope_session_free(s);
 *   flashscope_model_free(model);
 *
 * Conventions (those of llama.h, with the reasons of this project's STYLE.md):
 * - Opaque handles, created by a call that returns a flashscope_status and
 *   writes the handle through an out pointer, released by a *_free call that
 *   accepts NULL. Every fallible call returns a flashscope_status; its
 *   message is flashscope_last_error(). Each call below says what a failure
 *   leaves behind.
 * - Parameters come in structs initialised by *_default_params(); a NULL
 *   params pointer means the defaults. Fixed-width integer types throughout.
 * - Buffer calls take (buf, buf_size, out_size): *out_size is the size
 *   needed (terminating NUL included); with buf_size smaller than that the
 *   call returns FLASHSCOPE_BUFFER_TOO_SMALL and writes nothing to buf, so
 *   (NULL, 0, &size) asks for the size.
 * - The library never prints and never exits. It reports through the log
 *   callback (none by default) and return codes. No C++ exception crosses
 *   this boundary: one inside becomes FLASHSCOPE_OUT_OF_MEMORY
 *   (std::bad_alloc) or FLASHSCOPE_DEVICE_ERROR (anything else), with a
 *   message.
 * - Strings are UTF-8 and NUL-terminated.
 *
 * Threads: a model may be shared by sessions on any number of threads. A
 * session is used by one thread at a time, except for
 * flashscope_session_cancel(), which any thread may call at any time before
 * flashscope_session_free() begins. The last error is per thread.
 *
 * ABI compatibility: a program compiled with this header as MAJOR.MINOR runs
 * with a library of the same MAJOR and a MINOR at least its own once MAJOR
 * is 1 or more: within a major version functions, enum values and status
 * codes are only added, and the structs below keep their layout. While
 * MAJOR is 0, a minor version may change anything, so only the same
 * MAJOR.MINOR is compatible (the CMake package says the same:
 * SameMinorVersion). PATCH releases never change the ABI.
 * flashscope_check_version() applies this rule at run time.
 */
#ifndef FLASHSCOPE_FLASHSCOPE_H
#define FLASHSCOPE_FLASHSCOPE_H

#include <stddef.h>
#include <stdint.h>

/* Exported even when the library is built with hidden visibility. */
#if defined(__GNUC__)
#define FLASHSCOPE_API __attribute__((visibility("default")))
#else
#define FLASHSCOPE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* --- version ------------------------------------------------------------- */

/* The version of this header (the project's version). */
#define FLASHSCOPE_VERSION_MAJOR 0
#define FLASHSCOPE_VERSION_MINOR 1
#define FLASHSCOPE_VERSION_PATCH 0

/* The loaded library's version, "MAJOR.MINOR.PATCH". Never fails; static. */
FLASHSCOPE_API const char* flashscope_version(void);

/* --- status ---------------------------------------------------------------- */

typedef enum flashscope_status {
  FLASHSCOPE_OK = 0,
  FLASHSCOPE_INVALID_ARGUMENT = 1, /* NULL where a value is needed, a malformed parameter */
  FLASHSCOPE_UNSUPPORTED = 2,      /* well-formed, but this build or file is not supported */
  FLASHSCOPE_DEVICE_ERROR = 3,     /* the device (or an internal error) failed */
  FLASHSCOPE_OUT_OF_MEMORY = 4,    /* host or device allocation failed */
  FLASHSCOPE_IO_ERROR = 5,         /* a file could not be read */
  FLASHSCOPE_CORRUPT_DATA = 6,     /* a file's contents are inconsistent */
  FLASHSCOPE_CANCELLED = 7,        /* flashscope_session_cancel() stopped the call */
  FLASHSCOPE_CONTEXT_FULL = 8,     /* the session's context has no room */
  FLASHSCOPE_BUFFER_TOO_SMALL = 9  /* a caller buffer is smaller than *out_size */
} flashscope_status;

/* "ok", "invalid_argument", ...; "unknown" for a value not listed above. */
FLASHSCOPE_API const char* flashscope_status_name(flashscope_status status);

/* The message of the calling thread's most recent failed call ("" if none
 * failed yet), e.g. "model_load: io error: cannot open x.gguf: No such file
 * or directory". Successful calls leave it as it was. The pointer is valid
 * on this thread until its next failed call. FLASHSCOPE_CANCELLED and
 * FLASHSCOPE_CONTEXT_FULL from flashscope_session_generate set it too. */
FLASHSCOPE_API const char* flashscope_last_error(void);

/* FLASHSCOPE_OK when a program compiled against header version major.minor
 * can use this library (the rule at the top of this file); otherwise
 * FLASHSCOPE_UNSUPPORTED, and the message says both versions. */
FLASHSCOPE_API flashscope_status flashscope_check_version(int32_t major, int32_t minor);

/* --- logging --------------------------------------------------------------- */

typedef enum flashscope_log_level {
  FLASHSCOPE_LOG_DEBUG = 0, /* per call details: prompt sizes, generation speed */
  FLASHSCOPE_LOG_INFO = 1,  /* a model loaded, a generation cancelled */
  FLASHSCOPE_LOG_WARN = 2,
  FLASHSCOPE_LOG_ERROR = 3  /* every failed call's message, as flashscope_last_error() */
} flashscope_log_level;

/* message: one line, no trailing newline, valid during the call only. Called
 * on the thread making the library call, possibly from several threads at
 * once. It may call flashscope functions other than the one that logs. */
typedef void (*flashscope_log_callback)(flashscope_log_level level, const char* message, void* user);

/* Sets the process-wide log callback; NULL (the default) discards logs.
 * Thread-safe; a call already logging may still use the previous callback. */
FLASHSCOPE_API void flashscope_set_log_callback(flashscope_log_callback callback, void* user);

/* --- model ------------------------------------------------------------------- */

typedef struct flashscope_model flashscope_model;

typedef enum flashscope_device {
  FLASHSCOPE_DEVICE_CPU = 0,
  FLASHSCOPE_DEVICE_CUDA = 1 /* FLASHSCOPE_UNSUPPORTED in a CPU-only build or without a device */
} flashscope_device;

typedef struct flashscope_model_params {
  int32_t device;    /* flashscope_device; default FLASHSCOPE_DEVICE_CPU */
  int32_t n_threads; /* CPU threads per forward pass, at most FLASHSCOPE_MAX_THREADS;
                        0 (default): the physical cores not busy elsewhere,
                        at most 32 unless OMP_NUM_THREADS says more */
} flashscope_model_params;

/* The most n_threads may be: far above any machine's cores (each thread costs a stack). */
#define FLASHSCOPE_MAX_THREADS 1024

FLASHSCOPE_API flashscope_model_params flashscope_model_default_params(void);

/* Loads a GGUF model ("llama" architecture: SmolLM2, TinyLlama, Llama 2/3).
 * The weights stay memory-mapped. params NULL: the defaults.
 * On success *out_model is a new model (free it with flashscope_model_free).
 * On failure *out_model is NULL (when out_model is not NULL) and nothing is
 * allocated or left open:
 *   INVALID_ARGUMENT  path or out_model NULL, an unknown device, n_threads < 0
 *                     or above FLASHSCOPE_MAX_THREADS
 *   IO_ERROR          the file cannot be opened or read
 *   CORRUPT_DATA      not a GGUF file, or its metadata or tensors disagree
 *   UNSUPPORTED       another architecture, a tensor type or shape this build
 *                     does not run, or FLASHSCOPE_DEVICE_CUDA
 *   OUT_OF_MEMORY     the memory for the model could not be had */
FLASHSCOPE_API flashscope_status flashscope_model_load(const char* path, const flashscope_model_params* params,
                                                       flashscope_model** out_model);

/* How a FLASHSCOPE_DEVICE_CUDA model keeps its weights on the device. */
typedef enum flashscope_weight_format {
  /* In their GGUF blocks where the GPU reads the type in place (Q4_0, Q4_1,
   * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; others as bf16): about the file's
   * size on the device. */
  FLASHSCOPE_WEIGHTS_QUANTIZED = 0,
  /* Every matrix dequantized to bf16 at load: 2 bytes a weight. */
  FLASHSCOPE_WEIGHTS_BF16 = 1,
  /* BF16 for a small model (faster there), QUANTIZED for a larger one (see
   * flashscope::WeightFormat::kAuto). flashscope_model_load's choice. */
  FLASHSCOPE_WEIGHTS_AUTO = 2
} flashscope_weight_format;

/* flashscope_model_load with the device weights' format (a
 * flashscope_weight_format; the CPU ignores it). INVALID_ARGUMENT for an
 * unknown format, else as flashscope_model_load. */
FLASHSCOPE_API flashscope_status flashscope_model_load_weights(const char* path, const flashscope_model_params* params,
                                                               int32_t weights, flashscope_model** out_model);

/* What every sequence's KV cache keeps of each K and V element. */
typedef enum flashscope_kv_type {
  /* 2 bytes an element (flashscope_model_load's choice). */
  FLASHSCOPE_KV_BF16 = 0,
  /* Blocks of 32 along head_dim, 32 int8 and one fp16 scale each (1.0625
   * bytes an element, llama.cpp's q8_0 cache): about half the bytes a long
   * context's decode step reads. FLASHSCOPE_DEVICE_CPU only. */
  FLASHSCOPE_KV_Q8_0 = 1,
  /* Blocks of 32, 32 four-bit codes and one fp16 scale each (0.5625 bytes
   * an element, llama.cpp's q4_0 cache): a quarter of bf16's bytes, at a cost
   * in agreement with the bf16 cache. FLASHSCOPE_DEVICE_CPU only. */
  FLASHSCOPE_KV_Q4_0 = 2
} flashscope_kv_type;

/* flashscope_model_load_weights with the KV cache's element type (a
 * flashscope_kv_type). INVALID_ARGUMENT for an unknown type; UNSUPPORTED
 * for FLASHSCOPE_KV_Q8_0 or _Q4_0 on FLASHSCOPE_DEVICE_CUDA or for a model whose
 * head_dim is not a multiple of 32; else as flashscope_model_load_weights. */
FLASHSCOPE_API flashscope_status flashscope_model_load_kv(const char* path, const flashscope_model_params* params,
                                                          int32_t weights, int32_t kv_type,
                                                          flashscope_model** out_model);

/* Releases the handle. Sessions created from it stay valid (they share the
 * weights, which go when the last of them is freed). NULL is a no-op. */
FLASHSCOPE_API void flashscope_model_free(flashscope_model* model);

/* The context length the model was trained for (the default session size);
 * 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_model_n_ctx(const flashscope_model* model);
/* Vocabulary size (token ids are 0 .. n_vocab-1); 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_model_n_vocab(const flashscope_model* model);
/* Transformer layers; 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_model_n_layers(const flashscope_model* model);
/* Bytes of weights (mapped from the file); 0 for NULL. */
FLASHSCOPE_API uint64_t flashscope_model_size(const flashscope_model* model);
/* Device memory of a CUDA model's weights; 0 for NULL or a CPU model. */
FLASHSCOPE_API uint64_t flashscope_model_device_size(const flashscope_model* model);

/* The model's name (GGUF general.name; may be "") into buf, NUL-terminated.
 * *out_size (when out_size is not NULL) is the size needed, NUL included.
 *   INVALID_ARGUMENT   model NULL, or buf NULL with buf_size > 0: nothing written
 *   BUFFER_TOO_SMALL   buf_size < the size needed: buf untouched */
FLASHSCOPE_API flashscope_status flashscope_model_name(const flashscope_model* model, char* buf, size_t buf_size,
                                                       size_t* out_size);

/* --- session ------------------------------------------------------------------ */

/* One conversation: a message history and the KV cache that holds it,
 * rendered with the model's chat template (see "chat templates" below).
 * Each generate prefills only what the cache does not hold yet: the
 * messages added since the last reply. */
typedef struct flashscope_session flashscope_session;

typedef struct flashscope_session_params {
  /* Tokens the session can hold (prompt and replies of every turn).
   * Default 0: the model's context length. More is capped to it. */
  int32_t n_ctx;
  /* The system message used when the first message is not one. Default
   * NULL: the one the model's chat template writes (SmolLM2's when the
   * model falls back to ChatML); "": none of ours (a template may still
   * write its own default). Copied by flashscope_session_create. */
  const char* system_prompt;
} flashscope_session_params;

FLASHSCOPE_API flashscope_session_params flashscope_session_default_params(void);

/* A session on `model` with an empty history; params NULL: the defaults.
 * The cache memory is reserved now and committed as tokens arrive.
 * On failure *out_session is NULL (when out_session is not NULL) and nothing
 * is allocated; the model is unchanged:
 *   INVALID_ARGUMENT  model or out_session NULL, n_ctx < 0
 *   UNSUPPORTED       the model has no usable chat template and its
 *                     vocabulary lacks ChatML's <|im_start|> / <|im_end|>
 *   OUT_OF_MEMORY     the cache could not be reserved */
FLASHSCOPE_API flashscope_status flashscope_session_create(const flashscope_model* model,
                                                           const flashscope_session_params* params,
                                                           flashscope_session** out_session);

/* Releases the session. No call on it may be running (cancel included).
 * NULL is a no-op. */
FLASHSCOPE_API void flashscope_session_free(flashscope_session* session);

/* Appends a message to the history; it is prefilled by the next generate.
 * role: "system", "user" or "assistant". content is copied and encoded as
 * plain text: "<|im_end|>" typed by a user stays text, never a control
 * token.
 * On failure the history is unchanged:
 *   INVALID_ARGUMENT  session, role or content NULL, another role */
FLASHSCOPE_API flashscope_status flashscope_session_add_message(flashscope_session* session, const char* role,
                                                                const char* content);

typedef struct flashscope_generate_params {
  int32_t max_tokens;         /* tokens to sample at most (a final stop token counts); default 256 */
  float temperature;          /* <= 0 (default 0): greedy, and top_k/top_p/min_p/seed are ignored */
  int32_t top_k;              /* keep the k most likely tokens; <= 0 (default): all */
  float top_p;                /* nucleus: the smallest set with probability >= top_p; default 1: all */
  float min_p;                /* drop tokens below min_p x the top probability; default 0: none */
  float repetition_penalty;   /* > 1 discourages recent tokens; default 1: off */
  int32_t repeat_last_n;      /* how many recent tokens the penalty sees; < 0: all; default 64 */
  uint64_t seed;              /* sampling seed (the same seed, the same reply); default 0 */
  /* The reply ends when its text contains one of these (non-empty UTF-8;
   * copied during the call). Neither it nor what follows reaches the
   * callback, and text that could start one is held back until it cannot.
   * Default NULL, 0. The model's end-of-turn tokens (<|im_end|>, eos)
   * always end a reply. */
  const char* const* stop_strings;
  size_t n_stop_strings;
} flashscope_generate_params;

FLASHSCOPE_API flashscope_generate_params flashscope_generate_default_params(void);

/* The sampling the model's makers recommend, read when it loaded: the GGUF's
 * general.sampling.* keys (temp, top_k, top_p, min_p, penalty_repeat,
 * penalty_last_n), else the model card's advice for a family known here
 * (SmolLM2: temperature 0.2, top_p 0.9). Writes each of temperature, top_k,
 * top_p, min_p, repetition_penalty and repeat_last_n that the model
 * recommends into *params and leaves the other fields as they were:
 *   flashscope_generate_params gp = flashscope_generate_default_params();  // greedy
 *   flashscope_model_sampling_defaults(model, &gp);                         // the model's own
 *   INVALID_ARGUMENT  model or params NULL: nothing written */
FLASHSCOPE_API flashscope_status flashscope_model_sampling_defaults(const flashscope_model* model,
                                                                    flashscope_generate_params* params);

/* The parameters flashscope-cli, `serve` and the app answer with when their
 * user sets nothing: flashscope_generate_default_params()'s max_tokens and
 * stop strings, FlashScope's sampling (temperature 0.7, top_k 40, top_p
 * 0.95, min_p 0.05, no repetition penalty) with the model's recommendation
 * on top (as flashscope_model_sampling_defaults), seed 0. With a session's
 * (or queue's) default DRY this is the CLI's reply for the same seed.
 *   INVALID_ARGUMENT  model or params NULL: nothing written */
FLASHSCOPE_API flashscope_status flashscope_model_default_generate_params(const flashscope_model* model,
                                                                          flashscope_generate_params* params);

/* Where those values come from ("gguf metadata", "SmolLM2 model card"), or
 * "" when the model recommends nothing (the call above then writes
 * nothing), with the buffer rule of flashscope_model_name. */
FLASHSCOPE_API flashscope_status flashscope_model_sampling_source(const flashscope_model* model, char* buf,
                                                                  size_t buf_size, size_t* out_size);

typedef enum flashscope_stop_reason {
  FLASHSCOPE_STOP_NONE = -1,        /* the reply did not start (a failure before prefill) */
  FLASHSCOPE_STOP_MAX_TOKENS = 0,   /* max_tokens sampled */
  FLASHSCOPE_STOP_TOKEN = 1,        /* an end-of-turn token (not shown) */
  FLASHSCOPE_STOP_CALLBACK = 2,     /* the token callback returned 0 */
  FLASHSCOPE_STOP_CONTEXT_FULL = 3, /* the session is full (status FLASHSCOPE_CONTEXT_FULL) */
  FLASHSCOPE_STOP_STRING = 4,       /* a stop string appeared (not shown) */
  FLASHSCOPE_STOP_CANCELLED = 5     /* flashscope_session_cancel() (status FLASHSCOPE_CANCELLED) */
} flashscope_stop_reason;

typedef struct flashscope_generate_stats {
  int32_t prompt_tokens;      /* tokens prefilled by this call */
  int32_t generated_tokens;   /* tokens sampled (a final stop token included) */
  int32_t stop_reason;        /* flashscope_stop_reason */
  int32_t stop_token;         /* the token, for FLASHSCOPE_STOP_TOKEN; else -1 */
  int32_t stop_string;        /* index into stop_strings, for FLASHSCOPE_STOP_STRING; else -1 */
  int32_t n_tokens;           /* tokens the session holds after the call */
  double prefill_ms;          /* the prompt's forward pass */
  double ttft_ms;             /* from the call to the first sampled token */
  double decode_ms;           /* the one-token forward passes after it */
  double prefill_tokens_per_s;
  double decode_tokens_per_s;
} flashscope_generate_stats;

/* Called for each generated token. text (NUL-terminated, len bytes without
 * the NUL) is the complete UTF-8 text the token finishes; it may be empty
 * (a character split across tokens, text held back for a stop string, a
 * control token). After the last token, held-back text arrives once more
 * with token -1. Valid during the call only. Return nonzero to go on, 0 to
 * stop the reply (FLASHSCOPE_STOP_CALLBACK). It runs on the generating
 * thread, must not throw or longjmp, and must not call generate, reset or
 * free on this session (cancel is fine). */
typedef int (*flashscope_token_callback)(const char* text, size_t len, int32_t token, void* user);

/* Prefills the messages added since the last reply, then samples the
 * assistant's reply, streaming it through callback (may be NULL). The
 * reply's text (stop strings excluded) joins the history as an "assistant"
 * message, so the next turn needs only add_message + generate. params NULL:
 * the defaults. out_stats may be NULL; when not, it is always written
 * (stop_reason FLASHSCOPE_STOP_NONE when the reply did not start).
 * Returns:
 *   OK                the reply ended by max_tokens, an end-of-turn token, a
 *                     stop string or the callback (out_stats->stop_reason)
 *   CANCELLED         flashscope_session_cancel() stopped it after the token
 *                     in progress; what was generated is the reply, kept as
 *                     after OK, and the next turn continues the conversation
 *   CONTEXT_FULL      mid-reply (out_stats->prompt_tokens > 0): the reply
 *                     so far is kept as after OK, and the session can take
 *                     no more; before the reply (prompt_tokens == 0): the
 *                     new messages do not fit, nothing changed and they stay
 *                     queued. Reset the session, or start one with a larger
 *                     n_ctx.
 * Failures that leave the session as it was (history, cache, queued
 * messages):
 *   INVALID_ARGUMENT  session NULL; no message added since the last reply;
 *                     the chat template failed to render the history (its
 *                     raise_exception, a type error: the message says where);
 *                     max_tokens < 0, top_p <= 0, min_p outside [0, 1],
 *                     repetition_penalty <= 0, stop_strings NULL with
 *                     n_stop_strings > 0, a stop string NULL, empty or not
 *                     UTF-8
 *   OUT_OF_MEMORY / DEVICE_ERROR   the prompt's forward pass failed
 * A failure during the reply (OUT_OF_MEMORY, DEVICE_ERROR) keeps what was
 * generated before it as the reply, as CANCELLED does; out_stats then has
 * stop_reason FLASHSCOPE_STOP_NONE and prompt_tokens > 0 (the cache holds
 * the new messages). */
FLASHSCOPE_API flashscope_status flashscope_session_generate(flashscope_session* session,
                                                             const flashscope_generate_params* params,
                                                             flashscope_token_callback callback, void* user,
                                                             flashscope_generate_stats* out_stats);

/* OpenAI's presence and frequency penalties for this session's later
 * generates (flashscope_generate_params cannot grow without breaking
 * callers built against it): a token the reply has generated c times loses
 * presence x [c > 0] + frequency x c from its logit, after the repetition
 * penalty; the prompt does not count. Each in [-2, 2]; 0 and 0 (the
 * default) switch them off. Not while a generate runs on the session.
 *   INVALID_ARGUMENT  session NULL, or a value outside [-2, 2] or NaN: the
 *                     session keeps its values */
FLASHSCOPE_API flashscope_status flashscope_session_set_penalties(flashscope_session* session, float presence,
                                                                  float frequency);

/* DRY ("don't repeat yourself") for this session's later generates and
 * batch replies: a token that would extend a run of the last L tokens that
 * already appeared earlier in the conversation loses
 * multiplier x base^(L - allowed_length) from its logit when L >=
 * allowed_length; runs are searched in the last last_n tokens (< 0: the
 * whole conversation). It ends the loops small models fall into, greedy or
 * at low temperature. A session starts with FlashScope's default, the one
 * flashscope-cli, `serve` and the app use: 0.8, 1.75, 2, -1; multiplier 0
 * switches it off. Not while a generate runs on the session.
 *   INVALID_ARGUMENT  session NULL, multiplier < 0 or not finite, base < 1
 *                     or not finite, allowed_length < 1: the session keeps
 *                     its values */
FLASHSCOPE_API flashscope_status flashscope_session_set_dry(flashscope_session* session, float multiplier, float base,
                                                            int32_t allowed_length, int32_t last_n);

/* Makes the generate running on this session return FLASHSCOPE_CANCELLED
 * after the token in progress (a forward pass or a callback). Any thread,
 * any time before flashscope_session_free begins; lock-free. A cancel while
 * no generate runs is forgotten: each generate starts uncancelled. NULL is a
 * no-op. */
FLASHSCOPE_API void flashscope_session_cancel(flashscope_session* session);

/* Forgets the history and the cache (the memory stays reserved). NULL is a
 * no-op. Not while a generate runs on the session. */
FLASHSCOPE_API void flashscope_session_reset(flashscope_session* session);

/* Tokens the cache holds (all turns so far); 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_session_n_tokens(const flashscope_session* session);
/* Tokens the session can hold; 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_session_n_ctx(const flashscope_session* session);
/* Messages in the history (replies included); 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_session_n_messages(const flashscope_session* session);

/* Message `index` (0 = the first added; the default system prompt is not a
 * message) into role_buf / content_buf, each with the buffer rule above
 * (either buffer may be NULL with size 0 to skip it or ask its size).
 *   INVALID_ARGUMENT   session NULL, index outside [0, n_messages)
 *   BUFFER_TOO_SMALL   a buffer is too small: neither buffer is written,
 *                      both *out sizes are */
FLASHSCOPE_API flashscope_status flashscope_session_message(const flashscope_session* session, int32_t index,
                                                            char* role_buf, size_t role_buf_size,
                                                            size_t* out_role_size, char* content_buf,
                                                            size_t content_buf_size, size_t* out_content_size);

/* --- chat templates ---------------------------------------------------------------- */

/* Sessions render each turn with the model's chat template (GGUF
 * tokenizer.chat_template, parsed when the model loads): the whole history
 * is rendered, and when the text the cache holds is a prefix of it only the
 * rest is prefilled; a template that rewrites earlier turns keeps the cache's
 * common prefix and prefills from there. A model whose template is missing
 * or does not parse uses built-in ChatML (SmolLM2's), as before.
 * With a template, session_params.system_prompt is added as the first
 * message when the history does not start with a system message (NULL or
 * "": none is added, and the template may write its own default). */

/* The model's chat template source (may be "") into buf, with the buffer rule
 * of flashscope_model_name. */
FLASHSCOPE_API flashscope_status flashscope_model_chat_template(const flashscope_model* model, char* buf,
                                                                size_t buf_size, size_t* out_size);

/* Why the model's chat template is not used ("" when it is, or the file has
 * none): the construct and its line:column, e.g. "chat template 3:14:
 * unsupported tag 'include'". Buffer rule of flashscope_model_name. */
FLASHSCOPE_API flashscope_status flashscope_model_chat_template_error(const flashscope_model* model, char* buf,
                                                                      size_t buf_size, size_t* out_size);

/* Renders this session's turns with template_text (Jinja source, copied)
 * instead of the model's; NULL or "": the model's again. Takes effect at the
 * next generate, which re-renders the history and prefills from the first
 * token that differs. Not while a generate runs on the session.
 *   INVALID_ARGUMENT / UNSUPPORTED   session NULL, or the template does not
 *                     parse (flashscope_last_error names the construct and
 *                     its line:column): the session is unchanged */
FLASHSCOPE_API flashscope_status flashscope_session_set_chat_template(flashscope_session* session,
                                                                      const char* template_text);

/* --- request queue (continuous batching) -------------------------------------------- */

/* Many independent requests on one model, decoded together: a thread of the
 * queue's own runs `parallel` sessions in one batched step; a request that
 * arrives while others decode joins the next step, each reply ends on its
 * own and its session takes the next waiting request at once. Past
 * `parallel`, up to max_queued requests wait; beyond that submit refuses.
 * Requests are token ids (flashscope_model_tokenize); each starts from an
 * empty cache, and a greedy one gives the tokens flashscope_session_generate
 * would for the same tokens, whatever runs beside it. What a server needs
 * (flashscope-cli serve is built on the same C++ RequestQueue). */
typedef struct flashscope_queue flashscope_queue;

typedef struct flashscope_queue_params {
  int32_t parallel;   /* sessions decoded together, >= 1; default 4 */
  int32_t max_queued; /* requests that may wait for a session, >= 0; default 16 */
  int32_t n_ctx;      /* each session's tokens (prompt + reply); 0 (default): the model's context length */
} flashscope_queue_params;

FLASHSCOPE_API flashscope_queue_params flashscope_queue_default_params(void);

/* Starts the queue. On failure *out_queue is NULL:
 *   INVALID_ARGUMENT  model or out_queue NULL, parallel < 1, max_queued < 0,
 *                     n_ctx < 0 or above the model's context length
 *   OUT_OF_MEMORY     the sessions or the thread could not be had */
FLASHSCOPE_API flashscope_status flashscope_queue_create(const flashscope_model* model,
                                                         const flashscope_queue_params* params,
                                                         flashscope_queue** out_queue);

/* Cancels every request, waits for the queue's thread (each request's done
 * callback runs first) and releases the queue. NULL is a no-op. Not from a
 * callback of this queue. */
FLASHSCOPE_API void flashscope_queue_free(flashscope_queue* queue);

/* Called once per submitted request, on the queue's thread, after its last
 * token callback: status OK (the reply ended by max_tokens, an end-of-turn
 * token, a stop string or the token callback's 0), CANCELLED
 * (flashscope_queue_cancel; also before it started), CONTEXT_FULL (the
 * session filled up), or the error that stopped it. stats is valid during
 * the call only. */
typedef void (*flashscope_done_callback)(flashscope_status status, const flashscope_generate_stats* stats,
                                         void* user);

/* Queues a reply to tokens[0, n_tokens) (copied). The callbacks (either may
 * be NULL) run on the queue's thread and receive `user`; they may submit or
 * cancel, but not free the queue. *out_id (may be NULL) is the request's id
 * (1, 2, ...; never reused). Refused, with nothing queued and no callback:
 *   INVALID_ARGUMENT  queue or tokens NULL, n_tokens 0, a token outside the
 *                     vocabulary, a prompt of n_ctx tokens or more, a
 *                     malformed parameter (as flashscope_session_generate)
 *   OUT_OF_MEMORY     the queue is full: max_queued requests wait already */
FLASHSCOPE_API flashscope_status flashscope_queue_submit(flashscope_queue* queue, const int32_t* tokens,
                                                         size_t n_tokens, const flashscope_generate_params* params,
                                                         flashscope_token_callback on_token,
                                                         flashscope_done_callback on_done, void* user,
                                                         uint64_t* out_id);

/* flashscope_session_set_penalties for the requests submitted after it
 * (those already submitted keep theirs). Any thread.
 *   INVALID_ARGUMENT  queue NULL, or a value outside [-2, 2] or NaN */
FLASHSCOPE_API flashscope_status flashscope_queue_set_penalties(flashscope_queue* queue, float presence,
                                                                float frequency);

/* flashscope_session_set_dry for the requests submitted after it (a queue
 * starts with the same default as a session: 0.8, 1.75, 2, -1). Any thread.
 *   INVALID_ARGUMENT  queue NULL, or a value flashscope_session_set_dry
 *                     refuses: the queue keeps its values */
FLASHSCOPE_API flashscope_status flashscope_queue_set_dry(flashscope_queue* queue, float multiplier, float base,
                                                          int32_t allowed_length, int32_t last_n);

/* Stops request `id` (any thread): a waiting one never starts, a running one
 * stops after the token in progress; its done callback follows with
 * CANCELLED and its session takes the next request.
 *   INVALID_ARGUMENT  queue NULL, or no request with this id waits or runs */
FLASHSCOPE_API flashscope_status flashscope_queue_cancel(flashscope_queue* queue, uint64_t id);

/* Requests waiting, and running; 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_queue_n_waiting(const flashscope_queue* queue);
FLASHSCOPE_API int32_t flashscope_queue_n_running(const flashscope_queue* queue);

/* --- batched generation (many sessions stepped together) ----------------------------- */

/* The replies of several chat sessions of one model, advanced together one
 * token per step: each step runs one forward pass over every running reply
 * (the weights are read once for all of them), as a game with many
 * characters needs, stepped from its own loop (one step per frame, say):
 *
 *   flashscope_batch* batch = NULL;
 *   flashscope_batch_create(&batch);
 *   for (int i = 0; i < n_npcs; ++i) {
 *     flashscope_session_add_message(npc[i].session, "user", npc[i].heard);
 *     flashscope_batch_add(batch, npc[i].session, &gp, on_token, on_done, &npc[i], NULL);
 *   }
 *   while (flashscope_batch_n_running(batch) > 0) flashscope_batch_step(batch);
 *   flashscope_batch_free(batch);
 *
 * Each reply is what flashscope_session_generate would do on its session:
 * it prefills the messages added since the session's last reply, streams
 * through its own token callback, ends on its own (max_tokens, an
 * end-of-turn token, a stop string, the callback's 0, a full session,
 * flashscope_session_cancel() from any thread), and its text then joins the
 * session's history, so the session's next turn needs only add_message and
 * another generate or batch_add. A greedy reply is the one
 * flashscope_session_generate gives (on CUDA up to bf16 rounding).
 *
 * Threads: a batch is used by one thread at a time; its callbacks run on
 * the thread calling flashscope_batch_step. While its reply runs, a session
 * takes no other call but flashscope_session_cancel and the read-only ones
 * (n_tokens, n_messages, ...). The batch keeps nothing of a reply after its
 * done callback, so one batch may run for the whole program. */
typedef struct flashscope_batch flashscope_batch;

/* An empty batch. On failure *out_batch is NULL:
 *   INVALID_ARGUMENT  out_batch NULL
 *   OUT_OF_MEMORY */
FLASHSCOPE_API flashscope_status flashscope_batch_create(flashscope_batch** out_batch);

/* Releases the batch; not during its step or from its callbacks. Replies
 * still running stop where they are, without their done callback: what
 * each generated joins its session's history, as after a cancel (a reply
 * not prefilled yet leaves its messages queued). NULL is a no-op. */
FLASHSCOPE_API void flashscope_batch_free(flashscope_batch* batch);

/* Queues the reply of `session` to the messages added since its last reply;
 * the next flashscope_batch_step prefills them. params NULL: the defaults;
 * the session's penalties and DRY (flashscope_session_set_penalties,
 * flashscope_session_set_dry) apply. The
 * callbacks (either may be NULL) receive `user`: on_token as for
 * flashscope_session_generate; on_done once, after the reply's last token
 * and after its text joined the history, with what flashscope_session_generate
 * would have returned (OK, CANCELLED, CONTEXT_FULL, OUT_OF_MEMORY,
 * DEVICE_ERROR) and its stats. on_done may add messages to its session and
 * call flashscope_batch_add again (the reply joins the next step); no
 * callback may step or free the batch. *out_id (may be NULL) is the reply's
 * id (0, 1, ... in the order of add; never reused).
 * Refused, with nothing queued, no callback and the history as it was:
 *   INVALID_ARGUMENT  batch or session NULL; no message added since the
 *                     session's last reply; the session already has a reply
 *                     in this batch, or runs another model than the
 *                     replies in it; the template failed to render; a
 *                     malformed parameter (as flashscope_session_generate)
 *   CONTEXT_FULL      the new messages do not fit the session
 *   OUT_OF_MEMORY */
FLASHSCOPE_API flashscope_status flashscope_batch_add(flashscope_batch* batch, flashscope_session* session,
                                                      const flashscope_generate_params* params,
                                                      flashscope_token_callback on_token,
                                                      flashscope_done_callback on_done, void* user,
                                                      uint64_t* out_id);

/* Advances every reply by one token: prefills the replies added since the
 * last step (one forward pass each; each samples its first token), then
 * one batched forward pass for every reply that goes on; the replies that
 * ended get their done callback. OK when nothing ran (no reply).
 *   INVALID_ARGUMENT  batch NULL
 *   OUT_OF_MEMORY / DEVICE_ERROR   the batched forward pass failed: every
 *                     reply in it ended with that status (done callbacks
 *                     included), each keeping what it had generated */
FLASHSCOPE_API flashscope_status flashscope_batch_step(flashscope_batch* batch);

/* Replies queued or running (added and not yet done); 0 for NULL. */
FLASHSCOPE_API int32_t flashscope_batch_n_running(const flashscope_batch* batch);

/* text (UTF-8) as the model's token ids, without BOS; parse_special nonzero:
 * control tokens written as text ("<|im_start|>") become their ids. Buffer
 * rule in tokens: *out_n (when not NULL) is the count needed; with
 * max_tokens smaller, BUFFER_TOO_SMALL and nothing written.
 *   INVALID_ARGUMENT  model or text NULL, tokens NULL with max_tokens > 0 */
FLASHSCOPE_API flashscope_status flashscope_model_tokenize(const flashscope_model* model, const char* text,
                                                           int32_t parse_special, int32_t* tokens,
                                                           size_t max_tokens, size_t* out_n);

/* --- the model's own attention (flashscope/attention_capture.hpp) ------------------ */

/* Keeps layer `layer`'s query rows (-1: every layer's) from the session's
 * next forward pass on, so flashscope_session_capture_attention can trace
 * the attention the model really computed. Arming a layer already armed
 * changes nothing; arming another restarts every armed layer's rows.
 *   INVALID_ARGUMENT  session NULL, or layer outside [-1, n_layers) */
FLASHSCOPE_API flashscope_status flashscope_session_arm_attention_capture(flashscope_session* session,
                                                                          int32_t layer);

/* One head's attention over the captured rows (HeadSummary in
 * attention_capture.hpp): means over the rows of the entropy (nats), the
 * probability on the first token (the attention sink), on the previous
 * token, on the row's own token, and, for a model with sliding windows, on
 * the window ending at the row (-1 without one). */
typedef struct flashscope_head_summary {
  int32_t head;
  int32_t rows;
  double entropy;
  double first_token_mass;
  double previous_token_mass;
  double self_mass;
  double window_mass;
} flashscope_head_summary;

/* Runs the probed build of the attention the model uses on layer `layer`,
 * q-head `head`, over the query rows kept since arming and the keys and
 * values the session holds; writes the trace, its rows and keys labelled
 * with the conversation's tokens, to trace_path (NULL: no file) and the
 * head's summary to *out_summary (NULL: none).
 *   INVALID_ARGUMENT  session NULL, layer or head out of range, or no rows
 *                     kept for the layer (not armed, or nothing fed since)
 *   UNSUPPORTED       a CUDA model in a build without the probed kernels
 *   IO_ERROR          trace_path cannot be written */
FLASHSCOPE_API flashscope_status flashscope_session_capture_attention(flashscope_session* session, int32_t layer,
                                                                      int32_t head, const char* trace_path,
                                                                      flashscope_head_summary* out_summary);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FLASHSCOPE_FLASHSCOPE_H */

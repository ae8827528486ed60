/* The C ABI (flashscope/flashscope.h) from a C11 program, as an embedding
 * host uses it: version check, errors with their messages and the state
 * they leave, the buffer size protocol, a two-turn chat on the real model,
 * stop strings, a callback that stops early, cancel from a second thread
 * (pthreads), a full context.
 *
 * The checks that need no model run first. The model is
 * $FLASHSCOPE_MODEL_DIR (else assets/models)/SmolLM2-135M-Instruct.Q4_1.gguf;
 * when it is absent the program says so and exits 77, which ctest reports as
 * skipped (scripts/fetch_model.sh fetches it). Generation is greedy
 * (temperature 0), so every reply is reproducible. */
#define _POSIX_C_SOURCE 200809L /* pthreads and sched_yield under -std=c11 */

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashscope/flashscope.h"

#define SKIP_EXIT_CODE 77

static int g_failures = 0;

#define CHECK(cond)                                                                               \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: \"%s\")\n", __FILE__, __LINE__, #cond, \
              flashscope_last_error());                                                           \
      ++g_failures;                                                                               \
    }                                                                                             \
  } while (0)

/* A failed REQUIRE ends the program: what follows depends on it. */
#define REQUIRE(cond)                                 \
  do {                                                \
    int before_ = g_failures;                         \
    CHECK(cond);                                      \
    if (g_failures != before_) return finish();       \
  } while (0)

#define CHECK_STATUS(expr, want)                                                                      \
  do {                                                                                                \
    flashscope_status got_ = (expr);                                                                  \
    if (got_ != (want)) {                                                                             \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: \"%s\")\n", __FILE__, __LINE__, #expr, \
              flashscope_status_name(got_), flashscope_status_name(want), flashscope_last_error());       \
      ++g_failures;                                                                                   \
    }                                                                                                 \
  } while (0)

static int finish(void) {
  if (g_failures) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}

/* --- log callback ------------------------------------------------------------------ */

static atomic_int g_log_info = 0;
static atomic_int g_log_error = 0;
static atomic_int g_log_bad = 0; /* empty, or ending in a newline */

static void on_log(flashscope_log_level level, const char* message, void* user) {
  (void)user;
  if (!message || !*message || message[strlen(message) - 1] == '\n') atomic_fetch_add(&g_log_bad, 1);
  if (level == FLASHSCOPE_LOG_INFO) atomic_fetch_add(&g_log_info, 1);
  if (level == FLASHSCOPE_LOG_ERROR) atomic_fetch_add(&g_log_error, 1);
}

/* --- token callbacks ----------------------------------------------------------------- */

typedef struct {
  char text[4096];
  size_t len;
  int tokens;       /* events with a token id >= 0 */
  int stop_after;   /* return 0 after this many tokens; 0: never */
  int bad_events;   /* text not NUL-terminated at len, or a NULL text */
} reply_buf;

static int collect(const char* text, size_t len, int32_t token, void* user) {
  reply_buf* r = (reply_buf*)user;
  if (!text || text[len] != '\0' || strlen(text) != len) ++r->bad_events;
  if (r->len + len < sizeof r->text) {
    memcpy(r->text + r->len, text, len);
    r->len += len;
    r->text[r->len] = '\0';
  }
  if (token >= 0) ++r->tokens;
  return !(r->stop_after > 0 && r->tokens >= r->stop_after);
}

/* --- cancel from another thread ------------------------------------------------------ */

typedef struct {
  flashscope_session* session;
  atomic_int tokens_seen;
  atomic_int cancel_sent;
  int thread_error_empty; /* the canceller thread has its own (empty) last error */
} cancel_state;

static void* canceller(void* arg) {
  cancel_state* c = (cancel_state*)arg;
  while (atomic_load(&c->tokens_seen) < 1) sched_yield();
  flashscope_session_cancel(c->session);
  c->thread_error_empty = flashscope_last_error()[0] == '\0';
  atomic_store(&c->cancel_sent, 1);
  return NULL;
}

/* Holds the first token until the other thread has cancelled, so where the
 * reply stops does not depend on scheduling. */
static int wait_for_cancel(const char* text, size_t len, int32_t token, void* user) {
  (void)text;
  (void)len;
  cancel_state* c = (cancel_state*)user;
  if (token >= 0 && atomic_fetch_add(&c->tokens_seen, 1) == 0) {
    for (long spins = 0; !atomic_load(&c->cancel_sent) && spins < 2000000000L; ++spins) sched_yield();
  }
  return 1;
}

/* --- request queue -------------------------------------------------------------------- */

typedef struct {
  reply_buf reply;
  atomic_int done;
  atomic_int tokens_seen;
  flashscope_status status;
  flashscope_generate_stats stats;
} queued_reply;

static int queued_token(const char* text, size_t len, int32_t token, void* user) {
  queued_reply* q = (queued_reply*)user;
  if (token >= 0) atomic_fetch_add(&q->tokens_seen, 1);
  return collect(text, len, token, &q->reply);
}

static void queued_done(flashscope_status status, const flashscope_generate_stats* stats, void* user) {
  queued_reply* q = (queued_reply*)user;
  q->status = status;
  q->stats = *stats;
  atomic_store(&q->done, 1);
}

static void wait_done(queued_reply* q) {
  for (long spins = 0; !atomic_load(&q->done) && spins < 2000000000L; ++spins) sched_yield();
}

/* --- batched generation ------------------------------------------------------------------ */

typedef struct {
  reply_buf reply;
  int done_calls;
  flashscope_status status;
  flashscope_generate_stats stats;
  flashscope_session* cancel_at_first_token; /* cancels its own session from the token callback */
  flashscope_batch* batch;                   /* on_done adds the follow-up turn, when set */
  const char* follow_up;
  uint64_t follow_up_id;
} batch_reply;

static int batch_token(const char* text, size_t len, int32_t token, void* user) {
  batch_reply* b = (batch_reply*)user;
  if (token >= 0 && b->cancel_at_first_token) flashscope_session_cancel(b->cancel_at_first_token);
  return collect(text, len, token, &b->reply);
}

static void batch_done(flashscope_status status, const flashscope_generate_stats* stats, void* user);

static flashscope_session* g_follow_up_session = NULL;

static void batch_done(flashscope_status status, const flashscope_generate_stats* stats, void* user) {
  batch_reply* b = (batch_reply*)user;
  ++b->done_calls;
  b->status = status;
  b->stats = *stats;
  if (b->batch && b->follow_up && g_follow_up_session) {
    /* The next turn from the done callback: the reply is in the history already. */
    flashscope_session* s = g_follow_up_session;
    const char* text = b->follow_up;
    b->follow_up = NULL;
    memset(&b->reply, 0, sizeof b->reply);
    flashscope_generate_params gp = flashscope_generate_default_params();
    gp.max_tokens = 8;
    if (flashscope_session_add_message(s, "user", text) != FLASHSCOPE_OK ||
        flashscope_batch_add(b->batch, s, &gp, batch_token, batch_done, b, &b->follow_up_id) != FLASHSCOPE_OK) {
      ++g_failures;
    }
  }
}

/* ----------------------------------------------------------------------------------------- */

static flashscope_status chat_turn(flashscope_session* s, const char* user_text, int32_t max_tokens,
                                   reply_buf* reply, flashscope_generate_stats* stats) {
  flashscope_status st = flashscope_session_add_message(s, "user", user_text);
  if (st != FLASHSCOPE_OK) return st;
  flashscope_generate_params gp = flashscope_generate_default_params();
  gp.max_tokens = max_tokens;
  gp.temperature = 0.0f;
  memset(reply, 0, sizeof *reply);
  return flashscope_session_generate(s, &gp, collect, reply, stats);
}

/* The content of message `index`, through the size protocol. */
static char* message_content(flashscope_session* s, int32_t index, char* role, size_t role_size) {
  size_t need = 0;
  if (flashscope_session_message(s, index, NULL, 0, NULL, NULL, 0, &need) != FLASHSCOPE_OK) return NULL;
  char* content = (char*)malloc(need);
  if (!content) return NULL;
  if (flashscope_session_message(s, index, role, role_size, NULL, content, need, NULL) != FLASHSCOPE_OK) {
    free(content);
    return NULL;
  }
  return content;
}

int main(void) {
  /* Version: the header is the project's version, and the library agrees. */
  char want_version[32];
  snprintf(want_version, sizeof want_version, "%d.%d.%d", FLASHSCOPE_VERSION_MAJOR, FLASHSCOPE_VERSION_MINOR,
           FLASHSCOPE_VERSION_PATCH);
  CHECK(strcmp(want_version, FLASHSCOPE_PROJECT_VERSION) == 0);
  CHECK(strcmp(flashscope_version(), want_version) == 0);
  CHECK(flashscope_last_error()[0] == '\0');
  CHECK_STATUS(flashscope_check_version(FLASHSCOPE_VERSION_MAJOR, FLASHSCOPE_VERSION_MINOR), FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_check_version(FLASHSCOPE_VERSION_MAJOR + 1, 0), FLASHSCOPE_UNSUPPORTED);
  CHECK(strstr(flashscope_last_error(), want_version) != NULL);
  CHECK_STATUS(flashscope_check_version(FLASHSCOPE_VERSION_MAJOR, FLASHSCOPE_VERSION_MINOR + 1),
               FLASHSCOPE_UNSUPPORTED); /* a newer header than the library */
  CHECK(strcmp(flashscope_status_name(FLASHSCOPE_CONTEXT_FULL), "context_full") == 0);

  flashscope_set_log_callback(on_log, NULL);

  /* A missing file: IO_ERROR, a message naming it, *out NULL. */
  flashscope_model* model = (flashscope_model*)&g_failures; /* garbage the call must overwrite */
  const char* missing = "/nonexistent/flashscope-c-api-test.gguf";
  CHECK_STATUS(flashscope_model_load(missing, NULL, &model), FLASHSCOPE_IO_ERROR);
  CHECK(model == NULL);
  CHECK(strstr(flashscope_last_error(), missing) != NULL);
  CHECK(strncmp(flashscope_last_error(), "model_load: ", 12) == 0);
  CHECK(atomic_load(&g_log_error) >= 1);
  CHECK_STATUS(flashscope_model_load(NULL, NULL, &model), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_model_load(missing, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
  flashscope_model_params mp = flashscope_model_default_params();
  CHECK(mp.device == FLASHSCOPE_DEVICE_CPU && mp.n_threads == 0);
  mp.device = 7;
  CHECK_STATUS(flashscope_model_load(missing, &mp, &model), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(model == NULL);
  /* The weights' format: an unknown one is refused before the file is opened. */
  CHECK_STATUS(flashscope_model_load_weights(missing, NULL, 3, &model), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "weight format") != NULL);
  CHECK(model == NULL);
  CHECK_STATUS(flashscope_model_load_weights(missing, NULL, FLASHSCOPE_WEIGHTS_BF16, &model), FLASHSCOPE_IO_ERROR);
  CHECK_STATUS(flashscope_model_load_weights(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, &model), FLASHSCOPE_IO_ERROR);
  /* The KV cache's type: an unknown one is refused before the file is opened,
   * as are NULL path and out pointers; the known ones reach the file. */
  model = (flashscope_model*)&g_failures;
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_Q4_0 + 1, &model),
               FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "KV cache type") != NULL);
  CHECK(model == NULL);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, -1, &model),
               FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, 3, FLASHSCOPE_KV_Q8_0, &model), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_model_load_kv(NULL, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_Q8_0, &model),
               FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_Q8_0, NULL),
               FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_Q8_0, &model),
               FLASHSCOPE_IO_ERROR);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_Q4_0, &model),
               FLASHSCOPE_IO_ERROR);
  CHECK_STATUS(flashscope_model_load_kv(missing, NULL, FLASHSCOPE_WEIGHTS_AUTO, FLASHSCOPE_KV_BF16, &model),
               FLASHSCOPE_IO_ERROR);
  CHECK(model == NULL);
  CHECK(flashscope_model_device_size(NULL) == 0);

  /* NULL handles: no-ops and zeros, INVALID_ARGUMENT where a status is returned. */
  flashscope_model_free(NULL);
  flashscope_session_free(NULL);
  flashscope_session_cancel(NULL);
  flashscope_session_reset(NULL);
  CHECK(flashscope_model_n_ctx(NULL) == 0 && flashscope_session_n_tokens(NULL) == 0);
  flashscope_session* session = (flashscope_session*)&g_failures;
  CHECK_STATUS(flashscope_session_create(NULL, NULL, &session), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(session == NULL);
  flashscope_generate_stats stats;
  CHECK_STATUS(flashscope_session_generate(NULL, NULL, NULL, NULL, &stats), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_session_set_penalties(NULL, 0.0f, 0.0f), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_queue_set_penalties(NULL, 0.0f, 0.0f), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(stats.stop_reason == FLASHSCOPE_STOP_NONE && stats.generated_tokens == 0);

  /* The model, where the C++ tests look (tests/support/model_path.hpp). */
  const char* dir = getenv("FLASHSCOPE_MODEL_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/SmolLM2-135M-Instruct.Q4_1.gguf",
           dir && *dir ? dir : FLASHSCOPE_SOURCE_DIR "/assets/models");
  FILE* probe = fopen(path, "rb");
  if (!probe) {
    if (g_failures) return finish();
    printf("c_api_test: skipped the model checks: %s is absent (run scripts/fetch_model.sh)\n", path);
    return SKIP_EXIT_CODE;
  }
  fclose(probe);

  const int infos_before = atomic_load(&g_log_info);
  REQUIRE(flashscope_model_load(path, NULL, &model) == FLASHSCOPE_OK);
  REQUIRE(model != NULL);
  CHECK(atomic_load(&g_log_info) > infos_before); /* "loaded ..." */
  CHECK(flashscope_model_n_vocab(model) == 49152);
  CHECK(flashscope_model_n_ctx(model) == 8192);
  CHECK(flashscope_model_n_layers(model) == 30);
  CHECK(flashscope_model_size(model) > 50u * 1000 * 1000);
  CHECK(flashscope_model_device_size(model) == 0); /* a CPU model */

  /* The sampling SmolLM2's card recommends, read at load. */
  {
    flashscope_generate_params rec = flashscope_generate_default_params();
    CHECK_STATUS(flashscope_model_sampling_defaults(model, &rec), FLASHSCOPE_OK);
    CHECK(fabsf(rec.temperature - 0.2f) < 1e-6f && fabsf(rec.top_p - 0.9f) < 1e-6f);
    CHECK(rec.max_tokens == flashscope_generate_default_params().max_tokens);
    char source[64];
    CHECK_STATUS(flashscope_model_sampling_source(model, source, sizeof source, NULL), FLASHSCOPE_OK);
    CHECK(strcmp(source, "SmolLM2 model card") == 0);
  }

  /* The name through the size protocol. */
  size_t name_size = 0;
  CHECK_STATUS(flashscope_model_name(model, NULL, 0, &name_size), FLASHSCOPE_BUFFER_TOO_SMALL);
  CHECK(name_size > 1);
  char small[2] = {'#', '#'};
  CHECK_STATUS(flashscope_model_name(model, small, sizeof small, NULL), FLASHSCOPE_BUFFER_TOO_SMALL);
  CHECK(small[0] == '#' && small[1] == '#'); /* untouched */
  char name[256];
  size_t got_size = 0;
  CHECK_STATUS(flashscope_model_name(model, name, sizeof name, &got_size), FLASHSCOPE_OK);
  CHECK(got_size == name_size && strlen(name) + 1 == name_size);
  printf("c_api_test: model \"%s\", %d layers, vocabulary %d\n", name, flashscope_model_n_layers(model),
         flashscope_model_n_vocab(model));

  /* --- a two-turn chat ------------------------------------------------------------ */
  flashscope_session_params sp = flashscope_session_default_params();
  sp.n_ctx = 1024;
  REQUIRE(flashscope_session_create(model, &sp, &session) == FLASHSCOPE_OK);
  CHECK(flashscope_session_n_ctx(session) == 1024);
  /* Nothing to answer yet; a bad role. Neither changes anything. */
  CHECK_STATUS(flashscope_session_generate(session, NULL, NULL, NULL, &stats), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_session_add_message(session, "narrator", "x"), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_session_add_message(session, "user", NULL), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(flashscope_session_n_messages(session) == 0 && flashscope_session_n_tokens(session) == 0);

  reply_buf reply1, reply2;
  CHECK_STATUS(chat_turn(session, "Hi! What is your name?", 8, &reply1, &stats), FLASHSCOPE_OK);
  CHECK(reply1.bad_events == 0);
  CHECK(stats.generated_tokens >= 1 && stats.generated_tokens <= 8);
  CHECK(stats.prompt_tokens > 10); /* the default system prompt and the question */
  CHECK(stats.n_tokens == flashscope_session_n_tokens(session));
  CHECK(stats.stop_reason == FLASHSCOPE_STOP_MAX_TOKENS || stats.stop_reason == FLASHSCOPE_STOP_TOKEN);
  CHECK(strlen(reply1.text) > 0);
  const int32_t first_prompt = stats.prompt_tokens;
  printf("c_api_test: turn 1: \"%s\" (%d tokens, %.1f tokens/s)\n", reply1.text, stats.generated_tokens,
         stats.decode_tokens_per_s);

  /* The reply joined the history. */
  REQUIRE(flashscope_session_n_messages(session) == 2);
  char role[16];
  char* content = message_content(session, 1, role, sizeof role);
  REQUIRE(content != NULL);
  CHECK(strcmp(role, "assistant") == 0);
  CHECK(strcmp(content, reply1.text) == 0);
  free(content);

  /* Turn 2 prefills only the new message (and the closing of turn 1). */
  CHECK_STATUS(chat_turn(session, "What is 2+2?", 12, &reply2, &stats), FLASHSCOPE_OK);
  CHECK(stats.prompt_tokens > 0 && stats.prompt_tokens < first_prompt);
  CHECK(stats.prompt_tokens <= 24);
  CHECK(strstr(reply2.text, "4") != NULL); /* greedy SmolLM2-135M: "2 + 2 = 4." */
  CHECK(flashscope_session_n_messages(session) == 4);
  printf("c_api_test: turn 2: \"%s\" (prefilled %d tokens)\n", reply2.text, stats.prompt_tokens);
  const int32_t two_turns = flashscope_session_n_tokens(session);
  const int32_t reply2_tokens = stats.generated_tokens;

  /* The same conversation given as messages to a fresh session: the same
   * tokens in the cache before the second reply. The replay prefills turn 1
   * in one pass where the live session decoded it token by token, and the
   * CPU decode kernel sums in another order than the prompt tiles (a few
   * ulps), so a greedy near-tie may end the reply differently ("4." or
   * "4"); the same path twice gives the same bits (reply2c below). */
  flashscope_session* replay = NULL;
  REQUIRE(flashscope_session_create(model, &sp, &replay) == FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_add_message(replay, "user", "Hi! What is your name?"), FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_add_message(replay, "assistant", reply1.text), FLASHSCOPE_OK);
  reply_buf reply2b;
  CHECK_STATUS(chat_turn(replay, "What is 2+2?", 12, &reply2b, &stats), FLASHSCOPE_OK);
  /* Holds while the reply's text encodes back to the tokens that were
   * sampled, as it does for this reply. */
  CHECK(stats.n_tokens - stats.generated_tokens == two_turns - reply2_tokens);
  CHECK(strstr(reply2b.text, "4") != NULL);
  /* Presence and frequency penalties: OpenAI's range, refused outside it
   * with the session's values kept; 0 and 0 are the default, so the replay
   * again gives its reply to the bit. */
  CHECK_STATUS(flashscope_session_set_penalties(replay, 2.5f, 0.0f), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "presence") != NULL);
  CHECK_STATUS(flashscope_session_set_penalties(replay, 0.0f, -2.01f), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "frequency") != NULL);
  CHECK_STATUS(flashscope_session_set_penalties(replay, NAN, 0.0f), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK_STATUS(flashscope_session_set_penalties(replay, -2.0f, 2.0f), FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_set_penalties(replay, 0.0f, 0.0f), FLASHSCOPE_OK);
  flashscope_session_reset(replay);
  CHECK_STATUS(flashscope_session_add_message(replay, "user", "Hi! What is your name?"), FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_add_message(replay, "assistant", reply1.text), FLASHSCOPE_OK);
  reply_buf reply2c;
  CHECK_STATUS(chat_turn(replay, "What is 2+2?", 12, &reply2c, &stats), FLASHSCOPE_OK);
  CHECK(strcmp(reply2b.text, reply2c.text) == 0);
  flashscope_session_free(replay);

  /* --- chat templates ---------------------------------------------------------------- */
  /* The model's template parsed at load, and is what the turns above used. */
  size_t tmpl_size = 0;
  CHECK_STATUS(flashscope_model_chat_template(model, NULL, 0, &tmpl_size), FLASHSCOPE_BUFFER_TOO_SMALL);
  char* tmpl = (char*)malloc(tmpl_size);
  REQUIRE(tmpl != NULL);
  CHECK_STATUS(flashscope_model_chat_template(model, tmpl, tmpl_size, NULL), FLASHSCOPE_OK);
  CHECK(strstr(tmpl, "<|im_start|>") != NULL);
  free(tmpl);
  char tmpl_error[256];
  CHECK_STATUS(flashscope_model_chat_template_error(model, tmpl_error, sizeof tmpl_error, NULL), FLASHSCOPE_OK);
  CHECK(tmpl_error[0] == '\0');
  CHECK_STATUS(flashscope_model_chat_template_error(NULL, NULL, 0, NULL), FLASHSCOPE_INVALID_ARGUMENT);

  /* An override: a broken one is refused, naming the construct, and changes
   * nothing; a good one renders the next turn (here without the default
   * system prompt, so the whole history is prefilled again from the first
   * token that differs: position 1, after <|im_start|>). */
  flashscope_session* custom = NULL;
  sp.n_ctx = 1024;
  REQUIRE(flashscope_session_create(model, &sp, &custom) == FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_set_chat_template(NULL, "x"), FLASHSCOPE_INVALID_ARGUMENT);
  const flashscope_status bad_tmpl = flashscope_session_set_chat_template(custom, "{% include 'x' %}");
  CHECK(bad_tmpl == FLASHSCOPE_UNSUPPORTED || bad_tmpl == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "include") != NULL);
  reply_buf with_model_tmpl, with_override;
  CHECK_STATUS(chat_turn(custom, "Hi! What is your name?", 4, &with_model_tmpl, &stats), FLASHSCOPE_OK);
  const int32_t model_tmpl_tokens = stats.n_tokens;
  CHECK_STATUS(flashscope_session_set_chat_template(
                   custom,
                   "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                   "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
               FLASHSCOPE_OK);
  CHECK_STATUS(chat_turn(custom, "What is 2+2?", 4, &with_override, &stats), FLASHSCOPE_OK);
  CHECK(stats.prompt_tokens > 10); /* re-prefilled from where the system prompt was */
  CHECK(stats.n_tokens < model_tmpl_tokens + stats.prompt_tokens); /* the system prompt is gone */
  CHECK_STATUS(flashscope_session_set_chat_template(custom, NULL), FLASHSCOPE_OK); /* the model's again */
  flashscope_session_free(custom);

  /* --- a callback that stops early -------------------------------------------------- */
  flashscope_session_reset(session);
  CHECK(flashscope_session_n_tokens(session) == 0 && flashscope_session_n_messages(session) == 0);
  CHECK_STATUS(flashscope_session_add_message(session, "user", "Tell me a story about a dragon."), FLASHSCOPE_OK);
  reply_buf early;
  memset(&early, 0, sizeof early);
  early.stop_after = 2;
  flashscope_generate_params gp = flashscope_generate_default_params();
  gp.max_tokens = 16;
  CHECK_STATUS(flashscope_session_generate(session, &gp, collect, &early, &stats), FLASHSCOPE_OK);
  CHECK(stats.stop_reason == FLASHSCOPE_STOP_CALLBACK);
  CHECK(stats.generated_tokens == 2);
  CHECK(early.tokens == 2);

  /* --- stop strings ------------------------------------------------------------------ */
  /* Greedy says reply1 to the first question; stop at a piece of its middle. */
  const size_t reply1_len = strlen(reply1.text);
  if (reply1_len >= 8) {
    char stop[4];
    memcpy(stop, reply1.text + reply1_len / 2, 3);
    stop[3] = '\0';
    const char* stops[] = {"\x01never", stop};
    const size_t at = (size_t)(strstr(reply1.text, stop) - reply1.text);
    flashscope_session_reset(session);
    CHECK_STATUS(flashscope_session_add_message(session, "user", "Hi! What is your name?"), FLASHSCOPE_OK);
    gp = flashscope_generate_default_params();
    gp.max_tokens = 8;
    gp.stop_strings = stops;
    gp.n_stop_strings = 2;
    reply_buf cut;
    memset(&cut, 0, sizeof cut);
    CHECK_STATUS(flashscope_session_generate(session, &gp, collect, &cut, &stats), FLASHSCOPE_OK);
    CHECK(stats.stop_reason == FLASHSCOPE_STOP_STRING);
    CHECK(stats.stop_string == 1);
    CHECK(cut.len == at && strncmp(cut.text, reply1.text, at) == 0);
    content = message_content(session, 1, role, sizeof role);
    CHECK(content && strcmp(content, cut.text) == 0); /* the history has the shown text */
    free(content);
  } else {
    fprintf(stderr, "%s:%d: the first reply \"%s\" is too short to cut\n", __FILE__, __LINE__, reply1.text);
    ++g_failures;
  }
  /* Malformed stop strings change nothing. */
  const int32_t before_bad = flashscope_session_n_tokens(session);
  CHECK_STATUS(flashscope_session_add_message(session, "user", "Hi"), FLASHSCOPE_OK);
  gp = flashscope_generate_default_params();
  gp.n_stop_strings = 1;
  CHECK_STATUS(flashscope_session_generate(session, &gp, NULL, NULL, &stats), FLASHSCOPE_INVALID_ARGUMENT);
  const char* empty_stop[] = {""};
  gp.stop_strings = empty_stop;
  CHECK_STATUS(flashscope_session_generate(session, &gp, NULL, NULL, &stats), FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(strstr(flashscope_last_error(), "empty") != NULL);
  CHECK(flashscope_session_n_tokens(session) == before_bad);

  /* --- cancel from a second thread -------------------------------------------------- */
  flashscope_session_cancel(session); /* while nothing runs: forgotten */
  flashscope_session_reset(session);
  CHECK_STATUS(flashscope_session_add_message(session, "user", "Write a long poem about the sea."), FLASHSCOPE_OK);
  cancel_state cs;
  cs.session = session;
  atomic_init(&cs.tokens_seen, 0);
  atomic_init(&cs.cancel_sent, 0);
  cs.thread_error_empty = 0;
  pthread_t thread;
  REQUIRE(pthread_create(&thread, NULL, canceller, &cs) == 0);
  gp = flashscope_generate_default_params();
  gp.max_tokens = 64;
  const flashscope_status cancelled = flashscope_session_generate(session, &gp, wait_for_cancel, &cs, &stats);
  pthread_join(thread, NULL);
  CHECK_STATUS(cancelled, FLASHSCOPE_CANCELLED);
  CHECK(stats.stop_reason == FLASHSCOPE_STOP_CANCELLED);
  CHECK(stats.generated_tokens == 1);
  CHECK(strstr(flashscope_last_error(), "cancelled") != NULL);
  CHECK(cs.thread_error_empty); /* the last error is per thread */
  CHECK(flashscope_session_n_messages(session) == 2); /* the cut reply is kept */
  /* The conversation goes on after a cancel. */
  reply_buf after;
  CHECK_STATUS(chat_turn(session, "Thanks. What is 2+2?", 8, &after, &stats), FLASHSCOPE_OK);
  CHECK(stats.generated_tokens >= 1);
  CHECK(flashscope_session_n_messages(session) == 4);

  /* --- a full context ----------------------------------------------------------------- */
  /* The prompt's size, from a prefill-only turn. */
  flashscope_session_reset(session);
  CHECK_STATUS(flashscope_session_add_message(session, "user", "What is the capital of France?"), FLASHSCOPE_OK);
  gp = flashscope_generate_default_params();
  gp.max_tokens = 0;
  CHECK_STATUS(flashscope_session_generate(session, &gp, NULL, NULL, &stats), FLASHSCOPE_OK);
  const int32_t prompt_len = stats.prompt_tokens;

  flashscope_session* tiny = NULL;
  sp.n_ctx = prompt_len - 1; /* the question does not fit: nothing happens */
  REQUIRE(flashscope_session_create(model, &sp, &tiny) == FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_add_message(tiny, "user", "What is the capital of France?"), FLASHSCOPE_OK);
  gp.max_tokens = 8;
  CHECK_STATUS(flashscope_session_generate(tiny, &gp, NULL, NULL, &stats), FLASHSCOPE_CONTEXT_FULL);
  CHECK(stats.prompt_tokens == 0 && flashscope_session_n_tokens(tiny) == 0);
  CHECK(flashscope_session_n_messages(tiny) == 1); /* still queued */
  flashscope_session_free(tiny);

  sp.n_ctx = prompt_len + 3; /* it fits, the reply does not */
  REQUIRE(flashscope_session_create(model, &sp, &tiny) == FLASHSCOPE_OK);
  CHECK_STATUS(flashscope_session_add_message(tiny, "user", "What is the capital of France?"), FLASHSCOPE_OK);
  reply_buf partial;
  memset(&partial, 0, sizeof partial);
  CHECK_STATUS(flashscope_session_generate(tiny, &gp, collect, &partial, &stats), FLASHSCOPE_CONTEXT_FULL);
  CHECK(stats.prompt_tokens == prompt_len);
  CHECK(stats.stop_reason == FLASHSCOPE_STOP_CONTEXT_FULL);
  CHECK(stats.generated_tokens == 4); /* 3 fit in the cache, the 4th waits as the pending token */
  CHECK(flashscope_session_n_messages(tiny) == 2);

  /* The request queue: replies decoded together from token prompts. */
  {
    int32_t ids[64];
    size_t n_ids = 0;
    CHECK_STATUS(flashscope_model_tokenize(model, "The sky is", 0, NULL, 0, &n_ids), FLASHSCOPE_BUFFER_TOO_SMALL);
    REQUIRE(n_ids > 0 && n_ids < 64);
    CHECK_STATUS(flashscope_model_tokenize(model, "The sky is", 0, ids, 64, &n_ids), FLASHSCOPE_OK);
    flashscope_queue* queue = NULL;
    flashscope_queue_params qp = flashscope_queue_default_params();
    CHECK(qp.parallel == 4 && qp.max_queued == 16 && qp.n_ctx == 0);
    qp.parallel = 0;
    CHECK_STATUS(flashscope_queue_create(model, &qp, &queue), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK(queue == NULL);
    qp.parallel = 2;
    qp.n_ctx = 256;
    REQUIRE(flashscope_queue_create(model, &qp, &queue) == FLASHSCOPE_OK);
    flashscope_generate_params qgp = flashscope_generate_default_params();
    qgp.max_tokens = 5;
    CHECK_STATUS(flashscope_queue_submit(queue, NULL, 0, &qgp, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK_STATUS(flashscope_queue_cancel(queue, 12345), FLASHSCOPE_INVALID_ARGUMENT);
    queued_reply same[3];
    uint64_t qid[3];
    memset(same, 0, sizeof same);
    for (int i = 0; i < 3; ++i) {
      CHECK_STATUS(flashscope_queue_submit(queue, ids, n_ids, &qgp, queued_token, queued_done, &same[i], &qid[i]),
                   FLASHSCOPE_OK);
    }
    CHECK(qid[1] == qid[0] + 1 && qid[2] == qid[1] + 1);
    for (int i = 0; i < 3; ++i) wait_done(&same[i]);
    for (int i = 0; i < 3; ++i) {
      CHECK(same[i].status == FLASHSCOPE_OK);
      CHECK(same[i].stats.generated_tokens == 5 && same[i].stats.prompt_tokens == (int32_t)n_ids);
      CHECK(same[i].reply.tokens == 5 && same[i].reply.bad_events == 0);
      CHECK(strcmp(same[i].reply.text, same[0].reply.text) == 0); /* greedy: the same prompt, the same reply */
    }
    /* Cancel a long reply once it has begun. */
    queued_reply longr;
    memset(&longr, 0, sizeof longr);
    uint64_t long_id = 0;
    qgp.max_tokens = 200;
    CHECK_STATUS(flashscope_queue_submit(queue, ids, n_ids, &qgp, queued_token, queued_done, &longr, &long_id),
                 FLASHSCOPE_OK);
    for (long spins = 0; atomic_load(&longr.tokens_seen) < 1 && !atomic_load(&longr.done) && spins < 2000000000L;
         ++spins) {
      sched_yield();
    }
    flashscope_status cancelled = flashscope_queue_cancel(queue, long_id);
    wait_done(&longr);
    if (cancelled == FLASHSCOPE_OK) {
      CHECK(longr.status == FLASHSCOPE_CANCELLED && longr.stats.stop_reason == FLASHSCOPE_STOP_CANCELLED);
      CHECK(longr.stats.generated_tokens < 200);
    } else {
      CHECK(longr.status == FLASHSCOPE_OK); /* it ended (an end-of-turn token) before the cancel came */
    }
    CHECK(flashscope_queue_n_waiting(queue) == 0 && flashscope_queue_n_running(queue) == 0);
    flashscope_queue_free(queue);
    flashscope_queue_free(NULL);
  }

  /* --- the model's own attention: armed before a turn, a trace file and a summary ---- */
  {
    flashscope_session* traced = NULL;
    REQUIRE(flashscope_session_create(model, &sp, &traced) == FLASHSCOPE_OK);
    CHECK_STATUS(flashscope_session_arm_attention_capture(NULL, 0), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK_STATUS(flashscope_session_arm_attention_capture(traced, 30), FLASHSCOPE_INVALID_ARGUMENT);
    /* Nothing kept yet: refused, naming the arming call. */
    CHECK_STATUS(flashscope_session_capture_attention(traced, 3, 0, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK(strstr(flashscope_last_error(), "arm_attention_capture") != NULL);
    CHECK_STATUS(flashscope_session_arm_attention_capture(traced, 3), FLASHSCOPE_OK);
    reply_buf r;
    CHECK_STATUS(chat_turn(traced, "Name a color.", 4, &r, &stats), FLASHSCOPE_OK);
    char trace_path[256];
    snprintf(trace_path, sizeof trace_path, "/tmp/flashscope_c_api_capture_%ld.fstrace", (long)time(NULL));
    flashscope_head_summary hs;
    memset(&hs, 0, sizeof hs);
    CHECK_STATUS(flashscope_session_capture_attention(traced, 3, 2, trace_path, &hs), FLASHSCOPE_OK);
    CHECK(hs.head == 2);
    CHECK(hs.rows == flashscope_session_n_tokens(traced) - 1); /* the last sampled token is not fed yet */
    CHECK(hs.entropy >= 0.0 && hs.first_token_mass >= 0.0 && hs.first_token_mass <= 1.0 + 1e-9);
    CHECK(hs.window_mass == -1.0); /* SmolLM2 has no sliding window */
    FILE* written = fopen(trace_path, "rb");
    CHECK(written != NULL);
    if (written) fclose(written);
    remove(trace_path);
    CHECK_STATUS(flashscope_session_capture_attention(traced, 3, 9, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK_STATUS(flashscope_session_capture_attention(traced, 4, 0, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    flashscope_session_free(traced);
  }

  /* Batched generation: three sessions stepped together give the replies
   * each gives alone (greedy), the history takes each reply, a done callback
   * can queue the next turn, and a cancel ends only its own reply. */
  {
    static const char* questions[3] = {"What is the capital of France?", "Name a primary colour.",
                                       "What is 2 + 2?"};
    flashscope_generate_params bgp = flashscope_generate_default_params();
    bgp.max_tokens = 12;
    char alone[3][4096];
    for (int i = 0; i < 3; ++i) {
      flashscope_session* s = NULL;
      REQUIRE(flashscope_session_create(model, NULL, &s) == FLASHSCOPE_OK);
      reply_buf r;
      CHECK_STATUS(chat_turn(s, questions[i], bgp.max_tokens, &r, NULL), FLASHSCOPE_OK);
      memcpy(alone[i], r.text, sizeof alone[i]);
      flashscope_session_free(s);
    }

    flashscope_batch* batch = (flashscope_batch*)&g_failures;
    CHECK_STATUS(flashscope_batch_create(NULL), FLASHSCOPE_INVALID_ARGUMENT);
    REQUIRE(flashscope_batch_create(&batch) == FLASHSCOPE_OK);
    CHECK(flashscope_batch_n_running(batch) == 0 && flashscope_batch_n_running(NULL) == 0);
    CHECK_STATUS(flashscope_batch_step(batch), FLASHSCOPE_OK); /* nothing to run */
    CHECK_STATUS(flashscope_batch_step(NULL), FLASHSCOPE_INVALID_ARGUMENT);
    flashscope_session* npc[4];
    batch_reply br[4];
    memset(br, 0, sizeof br);
    for (int i = 0; i < 4; ++i) REQUIRE(flashscope_session_create(model, NULL, &npc[i]) == FLASHSCOPE_OK);
    /* Refused: no message yet, NULLs, a malformed parameter. Nothing is queued. */
    CHECK_STATUS(flashscope_batch_add(batch, npc[0], &bgp, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK_STATUS(flashscope_batch_add(NULL, npc[0], &bgp, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK_STATUS(flashscope_batch_add(batch, NULL, &bgp, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    for (int i = 0; i < 3; ++i) CHECK_STATUS(flashscope_session_add_message(npc[i], "user", questions[i]), FLASHSCOPE_OK);
    flashscope_generate_params bad = bgp;
    bad.top_p = 0.0f;
    CHECK_STATUS(flashscope_batch_add(batch, npc[0], &bad, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    CHECK(flashscope_batch_n_running(batch) == 0);

    uint64_t ids[4];
    for (int i = 0; i < 3; ++i) {
      CHECK_STATUS(flashscope_batch_add(batch, npc[i], &bgp, batch_token, batch_done, &br[i], &ids[i]),
                   FLASHSCOPE_OK);
    }
    CHECK(ids[1] == ids[0] + 1 && ids[2] == ids[1] + 1);
    /* One reply per session at a time. */
    CHECK_STATUS(flashscope_batch_add(batch, npc[0], &bgp, NULL, NULL, NULL, NULL), FLASHSCOPE_INVALID_ARGUMENT);
    /* The fourth is cancelled at its first token; the others go on. */
    CHECK_STATUS(flashscope_session_add_message(npc[3], "user", "Tell me a long story."), FLASHSCOPE_OK);
    br[3].cancel_at_first_token = npc[3];
    CHECK_STATUS(flashscope_batch_add(batch, npc[3], &bgp, batch_token, batch_done, &br[3], &ids[3]), FLASHSCOPE_OK);
    /* Session 0 asks a second question from its done callback. */
    br[0].batch = batch;
    br[0].follow_up = "And of Italy?";
    g_follow_up_session = npc[0];
    CHECK(flashscope_batch_n_running(batch) == 4);
    int steps = 0;
    while (flashscope_batch_n_running(batch) > 0 && steps < 100) {
      CHECK_STATUS(flashscope_batch_step(batch), FLASHSCOPE_OK);
      ++steps;
    }
    CHECK(flashscope_batch_n_running(batch) == 0);
    CHECK(steps <= 2 * bgp.max_tokens); /* one token per step, not one reply after another */
    for (int i = 1; i < 3; ++i) {
      CHECK(br[i].done_calls == 1 && br[i].status == FLASHSCOPE_OK);
      /* Every token shown but an end-of-turn token, which generated_tokens counts and no callback shows. */
      CHECK(br[i].reply.bad_events == 0 &&
            br[i].reply.tokens == br[i].stats.generated_tokens - (br[i].stats.stop_reason == FLASHSCOPE_STOP_TOKEN));
      CHECK(strcmp(br[i].reply.text, alone[i]) == 0); /* greedy: the reply it gives alone */
      CHECK(flashscope_session_n_messages(npc[i]) == 2);
      char role[16];
      char* content = message_content(npc[i], 1, role, sizeof role);
      CHECK(content && strcmp(role, "assistant") == 0 && strcmp(content, alone[i]) == 0);
      free(content);
      CHECK(br[i].stats.n_tokens == flashscope_session_n_tokens(npc[i]));
    }
    CHECK(br[3].done_calls == 1 && br[3].status == FLASHSCOPE_CANCELLED);
    CHECK(br[3].stats.stop_reason == FLASHSCOPE_STOP_CANCELLED && br[3].stats.generated_tokens == 1);
    CHECK(flashscope_session_n_messages(npc[3]) == 2);
    /* Session 0: both turns ran, the second after the first's reply joined the history. */
    CHECK(br[0].done_calls == 2 && br[0].status == FLASHSCOPE_OK && br[0].follow_up_id == ids[3] + 1);
    CHECK(flashscope_session_n_messages(npc[0]) == 4);
    char role0[16];
    char* first = message_content(npc[0], 1, role0, sizeof role0);
    CHECK(first && strcmp(first, alone[0]) == 0);
    free(first);
    /* The same two turns on one session alone give the same second reply. */
    {
      flashscope_session* s = NULL;
      REQUIRE(flashscope_session_create(model, NULL, &s) == FLASHSCOPE_OK);
      reply_buf r1, r2;
      CHECK_STATUS(chat_turn(s, questions[0], bgp.max_tokens, &r1, NULL), FLASHSCOPE_OK);
      CHECK_STATUS(chat_turn(s, "And of Italy?", 8, &r2, NULL), FLASHSCOPE_OK);
      CHECK(strcmp(r2.text, br[0].reply.text) == 0);
      flashscope_session_free(s);
    }
    /* A reply left running when the batch is freed joins the history as it stands. */
    CHECK_STATUS(flashscope_session_add_message(npc[1], "user", "Why?"), FLASHSCOPE_OK);
    memset(&br[1], 0, sizeof br[1]);
    CHECK_STATUS(flashscope_batch_add(batch, npc[1], &bgp, batch_token, batch_done, &br[1], NULL), FLASHSCOPE_OK);
    CHECK_STATUS(flashscope_batch_step(batch), FLASHSCOPE_OK);
    CHECK(br[1].reply.tokens >= 1 && br[1].done_calls == 0); /* still running */
    flashscope_batch_free(batch);
    flashscope_batch_free(NULL);
    CHECK(flashscope_session_n_messages(npc[1]) == 4);
    for (int i = 0; i < 4; ++i) flashscope_session_free(npc[i]);
    g_follow_up_session = NULL;
  }

  /* The q8_0 and q4_0 KV caches: refused on CUDA (the CUDA engine keeps
   * bf16), else the CPU engine's; a session over each answers a question as
   * the bf16 one does, and with the same greedy reply as the bf16 model's
   * session when the cache's rounding does not flip a near-tie (not
   * asserted: the engine tests measure the agreement). */
  {
    const int32_t kv_types[2] = {FLASHSCOPE_KV_Q8_0, FLASHSCOPE_KV_Q4_0};
    const char* kv_names[2] = {"q8_0", "q4_0"};
    for (int k = 0; k < 2; ++k) {
      flashscope_model_params kvp = flashscope_model_default_params();
      kvp.device = FLASHSCOPE_DEVICE_CUDA;
      flashscope_model* qm = (flashscope_model*)&g_failures;
      CHECK_STATUS(flashscope_model_load_kv(path, &kvp, FLASHSCOPE_WEIGHTS_AUTO, kv_types[k], &qm),
                   FLASHSCOPE_UNSUPPORTED);
      CHECK(strstr(flashscope_last_error(), kv_names[k]) != NULL);
      CHECK(qm == NULL);
      kvp.device = FLASHSCOPE_DEVICE_CPU;
      REQUIRE(flashscope_model_load_kv(path, &kvp, FLASHSCOPE_WEIGHTS_AUTO, kv_types[k], &qm) == FLASHSCOPE_OK);
      REQUIRE(qm != NULL);
      CHECK(flashscope_model_n_layers(qm) == 30);
      flashscope_session* s = NULL;
      REQUIRE(flashscope_session_create(qm, NULL, &s) == FLASHSCOPE_OK);
      reply_buf r;
      CHECK_STATUS(chat_turn(s, "What is 2+2?", 12, &r, &stats), FLASHSCOPE_OK);
      CHECK(r.bad_events == 0 && stats.generated_tokens >= 1);
      CHECK(strstr(r.text, "4") != NULL);
      printf("c_api_test: %s KV cache: \"%s\"\n", kv_names[k], r.text);
      flashscope_session_free(s);
      flashscope_model_free(qm);
    }
  }

  /* Sessions outlive the model handle. */
  flashscope_model_free(model);
  flashscope_session_reset(tiny);
  CHECK_STATUS(flashscope_session_add_message(tiny, "user", "Hi"), FLASHSCOPE_OK);
  gp.max_tokens = 2;
  CHECK_STATUS(flashscope_session_generate(tiny, &gp, NULL, NULL, &stats), FLASHSCOPE_OK);
  flashscope_session_free(tiny);
  flashscope_session_free(session);
  flashscope_set_log_callback(NULL, NULL);
  CHECK(atomic_load(&g_log_bad) == 0);
  return finish();
}

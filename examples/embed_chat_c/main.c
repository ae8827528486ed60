/* Embedding FlashScope's LLM engine in a C program through its C ABI
 * (flashscope/flashscope.h): load a model, hold one chat session, stream two
 * replies, cancel a third from another thread, then three characters of a
 * game answering together in batched steps (one forward pass per step for
 * all of them).
 *
 *   embed_chat_c MODEL.gguf
 *
 * Sampling is flashscope-cli's (flashscope_model_default_generate_params: the
 * library's defaults with the model's recommendation on top; sessions start
 * with DRY on) with a fixed seed, so a run is repeatable. */
#define _POSIX_C_SOURCE 200809L /* pthreads and sched_yield under -std=c11 */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <flashscope/flashscope.h>

static int fail(const char* what) {
  fprintf(stderr, "embed_chat_c: %s: %s\n", what, flashscope_last_error());
  return 1;
}

/* Streams each piece of the reply to stdout as it is sampled. */
static int print_token(const char* text, size_t len, int32_t token, void* user) {
  (void)token;
  (void)user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 1; /* go on */
}

/* --- cancel from another thread ------------------------------------------------- */

typedef struct {
  flashscope_session* session;
  atomic_int tokens_seen;
  atomic_int sent;
  atomic_int finished;
} cancel_state;

static void* canceller(void* arg) {
  cancel_state* c = (cancel_state*)arg;
  while (atomic_load(&c->tokens_seen) == 0 && !atomic_load(&c->finished)) sched_yield();
  if (atomic_load(&c->finished)) return NULL;
  flashscope_session_cancel(c->session); /* any thread, lock-free */
  atomic_store(&c->sent, 1);
  return NULL;
}

/* The reply's first token waits until the cancel is sent, so the run is the
 * same every time; a real program's UI thread cancels whenever the user asks. */
static int wait_for_cancel(const char* text, size_t len, int32_t token, void* user) {
  cancel_state* c = (cancel_state*)user;
  print_token(text, len, token, NULL);
  if (token >= 0 && atomic_fetch_add(&c->tokens_seen, 1) == 0) {
    while (!atomic_load(&c->sent)) sched_yield();
  }
  return 1;
}

/* --- a game's characters, answering together ------------------------------------- */

typedef struct {
  const char* name;
  const char* heard;
  flashscope_session* session;
  char reply[1024];
  size_t len;
  int done;
  flashscope_status status;
  int32_t tokens;
} character;

static int collect(const char* text, size_t len, int32_t token, void* user) {
  character* c = (character*)user;
  (void)token;
  if (c->len + len < sizeof c->reply) {
    memcpy(c->reply + c->len, text, len);
    c->len += len;
    c->reply[c->len] = '\0';
  }
  return 1;
}

static void on_done(flashscope_status status, const flashscope_generate_stats* stats, void* user) {
  character* c = (character*)user;
  c->done = 1;
  c->status = status;
  c->tokens = stats->generated_tokens;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: embed_chat_c MODEL.gguf\n");
    return 2;
  }
  if (flashscope_check_version(FLASHSCOPE_VERSION_MAJOR, FLASHSCOPE_VERSION_MINOR) != FLASHSCOPE_OK) {
    return fail("version");
  }
  flashscope_model* model = NULL;
  if (flashscope_model_load(argv[1], NULL, &model) != FLASHSCOPE_OK) return fail("model_load");
  flashscope_session* session = NULL;
  if (flashscope_session_create(model, NULL, &session) != FLASHSCOPE_OK) return fail("session_create");

  flashscope_generate_params gp;
  /* flashscope-cli's and serve's defaults: the library's, with the model's own on top */
  if (flashscope_model_default_generate_params(model, &gp) != FLASHSCOPE_OK) return fail("model_default_generate_params");
  gp.seed = 42;
  gp.max_tokens = 48;
  char name[256] = "", source[64] = "";
  flashscope_model_name(model, name, sizeof name, NULL);
  flashscope_model_sampling_source(model, source, sizeof source, NULL);
  printf("model: %s, %d layers; sampling: temperature %g, top-p %g (%s)\n", name, flashscope_model_n_layers(model),
         gp.temperature, gp.top_p, source[0] ? source : "FlashScope's defaults");

  const char* questions[2] = {"What is the capital of France?", "What is it famous for?"};
  for (int i = 0; i < 2; ++i) {
    flashscope_generate_stats st;
    if (flashscope_session_add_message(session, "user", questions[i]) != FLASHSCOPE_OK) return fail("add_message");
    printf("user: %s\nassistant: ", questions[i]);
    if (flashscope_session_generate(session, &gp, print_token, NULL, &st) != FLASHSCOPE_OK) return fail("generate");
    static const char* const stops[] = {"max_tokens", "stop_token", "callback", "context_full", "stop_string",
                                        "cancelled"};
    printf("\n[turn %d: %d tokens streamed, stop: %s]\n", i + 1, st.generated_tokens,
           st.stop_reason >= 0 && st.stop_reason <= 5 ? stops[st.stop_reason] : "none");
  }

  /* Turn 3, cancelled from another thread. */
  cancel_state cs;
  cs.session = session;
  atomic_init(&cs.tokens_seen, 0);
  atomic_init(&cs.sent, 0);
  atomic_init(&cs.finished, 0);
  pthread_t thread;
  if (pthread_create(&thread, NULL, canceller, &cs) != 0) {
    fprintf(stderr, "embed_chat_c: pthread_create failed\n");
    return 1;
  }
  const char* story = "Tell me a long story about a dragon.";
  flashscope_session_add_message(session, "user", story);
  printf("user: %s\nassistant: ", story);
  flashscope_generate_stats st;
  gp.max_tokens = 200;
  const flashscope_status cancelled = flashscope_session_generate(session, &gp, wait_for_cancel, &cs, &st);
  atomic_store(&cs.finished, 1);
  pthread_join(thread, NULL);
  if (cancelled != FLASHSCOPE_CANCELLED) {
    printf("\n[turn 3: ended (%s) before the cancel came]\n", flashscope_status_name(cancelled));
    return 1;
  }
  printf("\n[turn 3: cancelled from another thread after %d tokens; the session holds %d tokens]\n",
         st.generated_tokens, flashscope_session_n_tokens(session));

  /* Three characters answer together: one forward pass per step for all. */
  character npcs[3] = {{.name = "guard", .heard = "Who goes there?"},
                       {.name = "smith", .heard = "Can you fix my sword?"},
                       {.name = "bard", .heard = "Sing me a song."}};
  flashscope_batch* batch = NULL;
  if (flashscope_batch_create(&batch) != FLASHSCOPE_OK) return fail("batch_create");
  gp.max_tokens = 24;
  for (int i = 0; i < 3; ++i) {
    if (flashscope_session_create(model, NULL, &npcs[i].session) != FLASHSCOPE_OK) return fail("session_create");
    flashscope_session_add_message(npcs[i].session, "user", npcs[i].heard);
    if (flashscope_batch_add(batch, npcs[i].session, &gp, collect, on_done, &npcs[i], NULL) != FLASHSCOPE_OK) {
      return fail("batch_add");
    }
  }
  int steps = 0;
  while (flashscope_batch_n_running(batch) > 0) {
    if (flashscope_batch_step(batch) != FLASHSCOPE_OK) return fail("batch_step");
    ++steps;
  }
  for (int i = 0; i < 3; ++i) {
    printf("%s (asked \"%s\"): %s\n", npcs[i].name, npcs[i].heard, npcs[i].reply);
    printf("[%s: %d tokens, %s]\n", npcs[i].name, npcs[i].tokens, flashscope_status_name(npcs[i].status));
  }
  printf("[batch: 3 replies in %d steps]\n", steps);

  flashscope_batch_free(batch);
  for (int i = 0; i < 3; ++i) flashscope_session_free(npcs[i].session);
  flashscope_session_free(session);
  flashscope_model_free(model);
  return 0;
}

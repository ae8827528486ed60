// `serve` over loopback with cpp-httplib's client, on the default model
// (SmolLM2-135M; each case skips when it is absent), the server in this
// process on a free port:
//
//  * /health, /v1/models; a chat reply (stream and not) and a completion are
//    the tokens Session::generate gives the same prompt, with usage and
//    finish_reason;
//  * 16 concurrent clients (greedy and seeded sampling, streaming and not)
//    each get exactly what a sequential run gives them;
//  * a client that disconnects mid-stream cancels its request and frees its
//    slot (/metrics);
//  * past --parallel and --queue: 503 with Retry-After;
//  * every bad request gets its status and OpenAI's error shape naming the
//    field, while a stream beside them runs undisturbed; the API key;
//  * a soak of a few hundred small requests leaves the KV cache empty and
//    the resident memory near where it was.
#include <doctest/doctest.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashscope/engine.hpp"
#include "reasoning_stream.hpp"
#include "server.hpp"
#include "support/skip.hpp"

using namespace flashscope;
using nlohmann::json;

namespace {

// The default model, loaded once; null (the case skips) when absent.
const Model* default_model() {
  static Model model;
  static bool tried = false;
  if (!tried) {
    tried = true;
    const std::string path = find_default_model();
    if (!path.empty()) {
      auto m = Model::load(path);
      if (m.ok()) model = std::move(m).value();
    }
  }
  return model.loaded() ? &model : nullptr;
}

#define REQUIRE_DEFAULT_MODEL(var)                                              \
  const Model* var = default_model();                                           \
  if (var == nullptr) {                                                         \
    MESSAGE("skipped: the default model is absent (scripts/fetch_model.sh)");   \
    flashscope::testing::mark_skipped();                                        \
    return;                                                                     \
  }

// A server on 127.0.0.1 and a free port, running on its own thread.
struct TestServer {
  std::unique_ptr<server::Server> server;
  std::thread thread;
  int port = 0;

  TestServer(const Model& model, server::ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    auto s = server::Server::create(model, o);
    REQUIRE_MESSAGE(s.ok(), s.status().to_string());
    server = std::move(s).value();
    const Status bound = server->bind();
    REQUIRE_MESSAGE(bound.ok(), bound.to_string());
    port = server->port();
    thread = std::thread([this] { server->run(); });
  }
  ~TestServer() {
    server->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    c.set_write_timeout(60, 0);
    c.set_connection_timeout(60, 0);
    return c;
  }
};

server::ServerOptions options(int parallel, int queue, int ctx = 512) {
  server::ServerOptions o;
  o.parallel = parallel;
  o.max_queued = queue;
  o.ctx = ctx;
  o.model_id = "smollm2";
  return o;
}

// What a sequential run gives: the prompt through Session::generate alone.
struct Expected {
  std::string text;
  int tokens = 0;
  int prompt_tokens = 0;
  StopReason reason = StopReason::kMaxTokens;
};

Expected run_alone(const Model& model, const std::vector<int32_t>& prompt, const GenerateParams& gp) {
  SessionOptions so;
  so.max_tokens = 512;
  auto session = Session::create(model, so);
  REQUIRE(session.ok());
  Expected e;
  auto r = session->generate(prompt, gp, [&](const TokenEvent& ev) {
    e.text += std::string(ev.text);
    return true;
  });
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  e.tokens = r->generated_tokens;
  e.prompt_tokens = r->prompt_tokens;
  e.reason = r->stop_reason;
  return e;
}

Expected chat_alone(const Model& model, const std::string& user, const GenerateParams& gp) {
  auto ids = ChatFormat::for_model(model).encode({{"user", user}}, true);
  REQUIRE(ids.ok());
  return run_alone(model, *ids, gp);
}

// A streamed reply as the client sees it: the text of the deltas, the
// finish_reason, the usage chunk, and whether the framing was right.
struct Streamed {
  int status = 0;
  std::string text;
  std::string reasoning;  // delta.reasoning_content
  std::string finish_reason;
  json usage;
  bool done_marker = false;
  int chunks = 0;
  std::string error;  // the client's, when there was no response
};

Streamed post_stream(const TestServer& ts, const std::string& path, json body,
                     std::function<bool(const Streamed&)> keep_going = nullptr) {
  Streamed out;
  std::string buffer;
  body["stream"] = true;
  httplib::Client c = ts.client();
  // httplib 0.11's Post has no content receiver: a Request carries it.
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      REQUIRE(event.rfind("data: ", 0) == 0);
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        out.done_marker = true;
        continue;
      }
      const json j = json::parse(payload);
      ++out.chunks;
      if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
      if (j["choices"].empty()) continue;
      const json& ch = j["choices"][0];
      if (ch.contains("delta") && ch["delta"].contains("content")) out.text += ch["delta"]["content"].get<std::string>();
      if (ch.contains("delta") && ch["delta"].contains("reasoning_content")) {
        out.reasoning += ch["delta"]["reasoning_content"].get<std::string>();
      }
      if (ch.contains("text")) out.text += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) out.finish_reason = ch["finish_reason"].get<std::string>();
    }
    return !keep_going || keep_going(out);
  };
  auto res = c.send(req);
  if (res) {
    out.status = res->status;
  } else {
    out.error = httplib::to_string(res.error());
  }
  return out;
}

json post_json(const TestServer& ts, const std::string& path, const std::string& body, int* status,
               const httplib::Headers& headers = {}, httplib::Headers* response_headers = nullptr) {
  httplib::Client c = ts.client();
  auto res = c.Post(path, headers, body, "application/json");
  REQUIRE(res);
  *status = res->status;
  if (response_headers) *response_headers = res->headers;
  return json::parse(res->body, nullptr, false);
}

std::map<std::string, double> metrics(const TestServer& ts) {
  httplib::Client c = ts.client();
  auto res = c.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  std::map<std::string, double> m;
  size_t pos = 0;
  const std::string& b = res->body;
  while (pos < b.size()) {
    size_t end = b.find('\n', pos);
    if (end == std::string::npos) end = b.size();
    const std::string line = b.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    REQUIRE_MESSAGE(sp != std::string::npos, line);
    char* parsed_to = nullptr;
    const std::string value = line.substr(sp + 1);
    m[line.substr(0, sp)] = std::strtod(value.c_str(), &parsed_to);
    REQUIRE_MESSAGE(parsed_to != value.c_str(), line);
  }
  return m;
}

// Polls /metrics until pred holds (true) or `seconds` pass (false).
bool wait_for_metrics(const TestServer& ts, const std::function<bool(std::map<std::string, double>&)>& pred,
                      double seconds = 30) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    auto m = metrics(ts);
    if (pred(m)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// What the server gives a request that sets only max_tokens and temperature:
// the model's default_sampling (the CLI's defaults), DRY included.
GenerateParams served(const Model& model, int max_tokens, float temperature) {
  GenerateParams gp;
  gp.max_tokens = max_tokens;
  gp.sampling = default_sampling(model.sampling_defaults());
  gp.sampling.temperature = temperature;
  return gp;
}
GenerateParams greedy(const Model& model, int max_tokens) { return served(model, max_tokens, 0.0f); }

}  // namespace

TEST_CASE("serve: health, models, and chat and completion replies equal Session::generate's") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(2, 4));
  httplib::Client c = ts.client();
  auto health = c.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  auto models = c.Get("/v1/models");
  REQUIRE(models);
  CHECK(models->status == 200);
  const json mj = json::parse(models->body);
  CHECK(mj["object"] == "list");
  CHECK(mj["data"][0]["id"] == "smollm2");

  const Expected want = chat_alone(*model, "What is the capital of France?", greedy(*model, 12));
  int status = 0;
  json body = {{"model", "smollm2"},
               {"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}}}},
               {"max_tokens", 12},
               {"temperature", 0}};
  const json r = post_json(ts, "/v1/chat/completions", body.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["object"] == "chat.completion");
  CHECK(r["choices"][0]["message"]["role"] == "assistant");
  CHECK(r["choices"][0]["message"]["content"] == want.text);
  CHECK(r["choices"][0]["finish_reason"] == (want.reason == StopReason::kMaxTokens ? "length" : "stop"));
  CHECK(r["usage"]["prompt_tokens"] == want.prompt_tokens);
  CHECK(r["usage"]["completion_tokens"] == want.tokens);
  CHECK(r["usage"]["total_tokens"] == want.prompt_tokens + want.tokens);

  body["stream_options"] = {{"include_usage", true}};
  const Streamed s = post_stream(ts, "/v1/chat/completions", body);
  CHECK(s.status == 200);
  CHECK(s.done_marker);
  CHECK(s.text == want.text);
  CHECK(s.finish_reason == r["choices"][0]["finish_reason"]);
  CHECK(s.usage["completion_tokens"] == want.tokens);

  // A completion: the prompt as it is (SmolLM2 adds no BOS).
  const std::vector<int32_t> ids = model->tokenizer().encode("The sky is", false);
  const Expected wc = run_alone(*model, ids, greedy(*model, 6));
  const json cr = post_json(ts, "/v1/completions", R"({"prompt": "The sky is", "max_tokens": 6, "temperature": 0})",
                            &status);
  REQUIRE(status == 200);
  CHECK(cr["object"] == "text_completion");
  CHECK(cr["choices"][0]["text"] == wc.text);
  CHECK(cr["usage"]["completion_tokens"] == wc.tokens);

  // A stop string ends the reply before it; "stop" is its finish_reason.
  GenerateParams gs = greedy(*model, 24);
  gs.stop_strings = {" "};
  const Expected ws = run_alone(*model, ids, gs);
  const json sr = post_json(ts, "/v1/completions",
                            R"({"prompt": "The sky is", "max_tokens": 24, "temperature": 0, "stop": [" "]})", &status);
  REQUIRE(status == 200);
  CHECK(sr["choices"][0]["text"] == ws.text);
  CHECK(sr["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("serve: presence_penalty and frequency_penalty reach the sampler, with Session::generate's result") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(2, 4));
  const std::vector<int32_t> ids = model->tokenizer().encode("Count: one, two, one, two, one, two,", false);
  const Expected plain = run_alone(*model, ids, greedy(*model, 32));
  GenerateParams gp = greedy(*model, 32);
  gp.sampling.presence_penalty = 1.5f;
  gp.sampling.frequency_penalty = 2.0f;
  const Expected want = run_alone(*model, ids, gp);
  // The penalties change this greedy reply, so a server that dropped them fails below.
  REQUIRE(want.text != plain.text);
  int status = 0;
  const json body = {{"prompt", "Count: one, two, one, two, one, two,"},
                     {"max_tokens", 32},
                     {"temperature", 0},
                     {"presence_penalty", 1.5},
                     {"frequency_penalty", 2.0}};
  const json r = post_json(ts, "/v1/completions", body.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["choices"][0]["text"] == want.text);
  CHECK(r["usage"]["completion_tokens"] == want.tokens);
  // Streamed: the same tokens.
  const Streamed st = post_stream(ts, "/v1/completions", body);
  CHECK(st.status == 200);
  CHECK(st.text == want.text);
}

TEST_CASE("serve: a request without sampling fields gets the CLI's defaults for the model, DRY included") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(2, 4));
  const std::string text = "Count: one, two, one, two, one, two,";
  const std::vector<int32_t> ids = model->tokenizer().encode(text, false);
  const GenerateParams with_dry = greedy(*model, 32);
  REQUIRE(with_dry.sampling.dry_multiplier > 0.0f);
  GenerateParams without_dry = with_dry;
  without_dry.sampling.dry_multiplier = 0.0f;
  const Expected want = run_alone(*model, ids, with_dry);
  const Expected off = run_alone(*model, ids, without_dry);
  // DRY changes this greedy reply, so a server without it by default fails below.
  REQUIRE(want.text != off.text);
  int status = 0;
  json body = {{"prompt", text}, {"max_tokens", 32}, {"temperature", 0}};
  json r = post_json(ts, "/v1/completions", body.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["choices"][0]["text"] == want.text);
  // llama.cpp's server's field turns it off.
  body["dry_multiplier"] = 0;
  r = post_json(ts, "/v1/completions", body.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["choices"][0]["text"] == off.text);

  // Sampled, with no sampling field but the seed: the model's defaults (the
  // CLI's temperature, top-k, top-p, min-p and DRY), not OpenAI's temperature 1.
  GenerateParams defaults = served(*model, 24, default_sampling(model->sampling_defaults()).temperature);
  defaults.sampling.seed = 5;
  GenerateParams openai;
  openai.max_tokens = 24;
  openai.sampling.temperature = 1.0f;
  openai.sampling.seed = 5;
  const Expected want_sampled = chat_alone(*model, "Tell me about the sea.", defaults);
  REQUIRE(want_sampled.text != chat_alone(*model, "Tell me about the sea.", openai).text);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Tell me about the sea."}}}},
                     {"max_tokens", 24},
                     {"seed", 5}};
  r = post_json(ts, "/v1/chat/completions", chat.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["choices"][0]["message"]["content"] == want_sampled.text);
}

TEST_CASE("serve: a template that opens a <think> block: the reply comes back as reasoning_content") {
  REQUIRE_DEFAULT_MODEL(model);
  // ChatML whose generation prompt opens the block, as Qwen3's does when thinking.
  const std::string tpl =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  server::ServerOptions o = options(1, 2);
  o.chat_template = tpl;
  TestServer ts(*model, o);
  auto ids = ChatFormat::for_model(*model, tpl).encode({{"user", "Why is the sky blue?"}}, true);
  REQUIRE(ids.ok());
  const Expected want = run_alone(*model, *ids, greedy(*model, 12));
  const ReasoningSplit split = server::split_reply(want.text, true);
  REQUIRE(!split.reasoning.empty());
  json body = {{"messages", {{{"role", "user"}, {"content", "Why is the sky blue?"}}}},
               {"max_tokens", 12},
               {"temperature", 0}};
  int status = 0;
  const json r = post_json(ts, "/v1/chat/completions", body.dump(), &status);
  REQUIRE(status == 200);
  CHECK(r["choices"][0]["message"]["reasoning_content"] == split.reasoning);
  CHECK(r["choices"][0]["message"]["content"] == split.content);
  const Streamed s = post_stream(ts, "/v1/chat/completions", body);
  CHECK(s.reasoning == split.reasoning);
  CHECK(s.text == split.content);
}

TEST_CASE("serve: 16 concurrent clients each get exactly the tokens a sequential run gives") {
  REQUIRE_DEFAULT_MODEL(model);
  constexpr int kClients = 16;
  constexpr int kMaxTokens = 8;
  const char* topics[] = {"cats", "the sea", "GPUs", "bread", "winter", "chess", "rivers", "music"};
  struct Case {
    std::string user;
    bool sampled;
    uint64_t seed;
    bool stream;
    Expected want;
  };
  std::vector<Case> cases;
  for (int i = 0; i < kClients; ++i) {
    Case c;
    c.user = std::string("Write one sentence about ") + topics[i % 8] + (i >= 8 ? ", please." : ".");
    c.sampled = i % 2 == 1;  // half greedy, half sampled with their own seed
    c.seed = 1000 + static_cast<uint64_t>(i);
    c.stream = i % 4 < 2;
    GenerateParams gp = greedy(*model, kMaxTokens);
    if (c.sampled) {
      gp.sampling.temperature = 0.8f;
      gp.sampling.seed = c.seed;
    }
    c.want = chat_alone(*model, c.user, gp);
    cases.push_back(c);
  }
  TestServer ts(*model, options(4, kClients));
  std::vector<std::string> got(kClients);
  std::vector<int> got_tokens(kClients, -1), statuses(kClients, 0);
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      const Case& c = cases[static_cast<size_t>(i)];
      json body = {{"messages", {{{"role", "user"}, {"content", c.user}}}},
                   {"max_tokens", kMaxTokens},
                   {"temperature", c.sampled ? 0.8 : 0.0},
                   {"seed", c.seed}};
      if (c.stream) {
        body["stream_options"] = {{"include_usage", true}};
        Streamed s = post_stream(ts, "/v1/chat/completions", body);
        statuses[i] = s.status;
        errors[i] = s.error;
        got[i] = s.text;
        if (s.usage.is_object()) got_tokens[i] = s.usage["completion_tokens"].get<int>();
      } else {
        httplib::Client cl = ts.client();
        auto res = cl.Post("/v1/chat/completions", body.dump(), "application/json");
        if (!res) {
          errors[i] = httplib::to_string(res.error());
          return;
        }
        statuses[i] = res->status;
        const json r = json::parse(res->body, nullptr, false);
        if (res->status != 200) return;
        got[i] = r["choices"][0]["message"]["content"].get<std::string>();
        got_tokens[i] = r["usage"]["completion_tokens"].get<int>();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    CAPTURE(i);
    CAPTURE(cases[i].user);
    CAPTURE(errors[i]);
    CHECK(statuses[i] == 200);
    CHECK(got[i] == cases[i].want.text);
    CHECK(got_tokens[i] == cases[i].want.tokens);
  }
  auto m = metrics(ts);
  CHECK(m["flashscope_requests_completed_total"] == kClients);
  // They ran together: fewer batched steps than tokens generated.
  CHECK(m["flashscope_batch_steps_total"] < m["flashscope_generated_tokens_total"]);
}

TEST_CASE("serve: a client that disconnects mid-stream cancels its request and frees its slot") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(1, 2));
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a very long story about a dragon."}}}},
               {"max_tokens", 400},
               {"temperature", 0}};
  // Stop reading (the client closes the connection) after the first words.
  const Streamed s = post_stream(ts, "/v1/chat/completions", body, [](const Streamed& st) { return st.text.size() < 8; });
  CHECK(s.text.size() >= 8);
  CHECK_FALSE(s.done_marker);
  const bool freed = wait_for_metrics(ts, [](auto& m) {
    return m["flashscope_requests_running"] == 0 && m["flashscope_requests_cancelled_total"] == 1;
  });
  CHECK(freed);
  auto m = metrics(ts);
  CHECK(m["flashscope_kv_tokens_in_use"] == 0);
  CHECK(m["flashscope_generated_tokens_total"] < 400);  // it stopped well before max_tokens
  // The slot serves the next request.
  int status = 0;
  const json r = post_json(
      ts, "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0})", &status);
  CHECK(status == 200);
}

TEST_CASE("serve: a server stopped and destroyed right after a client left mid-stream ends that request first") {
  REQUIRE_DEFAULT_MODEL(model);
  // The request is cancelled as the client leaves, but it ends (on_done,
  // which records its stats in the server) on the queue's thread after the
  // step in progress: the server's destructor must let it end before the
  // stats go. A heap corruption (or an AddressSanitizer report) otherwise.
  json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a very long story about a dragon."}}}},
               {"max_tokens", 400},
               {"temperature", 0}};
  for (int round = 0; round < 3; ++round) {
    TestServer ts(*model, options(2, 2));
    const Streamed s =
        post_stream(ts, "/v1/chat/completions", body, [](const Streamed& st) { return st.text.empty(); });
    CHECK_FALSE(s.text.empty());  // it was running
    CHECK_FALSE(s.done_marker);
  }
}

TEST_CASE("serve: past --parallel and --queue a request gets 503 with Retry-After") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(1, 1));
  json body = {{"messages", {{{"role", "user"}, {"content", "Count from one to one hundred."}}}},
               {"max_tokens", 300},
               {"temperature", 0}};
  // One runs and one waits; they read until told to stop.
  std::atomic<bool> release{false};
  auto hold = [&](const Streamed&) { return !release.load(); };
  std::thread running([&] { post_stream(ts, "/v1/chat/completions", body, hold); });
  REQUIRE(wait_for_metrics(ts, [](auto& m) { return m["flashscope_requests_running"] == 1; }));
  std::thread waiting([&] { post_stream(ts, "/v1/chat/completions", body, hold); });
  REQUIRE(wait_for_metrics(ts, [](auto& m) { return m["flashscope_requests_queued"] == 1; }));
  int status = 0;
  httplib::Headers headers;
  const json r = post_json(ts, "/v1/chat/completions", body.dump(), &status, {}, &headers);
  CHECK(status == 503);
  CHECK(headers.count("Retry-After") == 1);
  CHECK(r["error"]["type"] == "server_error");
  CHECK(metrics(ts)["flashscope_requests_rejected_total"] == 1);
  release = true;
  running.join();
  waiting.join();
  CHECK(wait_for_metrics(ts, [](auto& m) {
    return m["flashscope_requests_running"] == 0 && m["flashscope_requests_queued"] == 0;
  }));
}

TEST_CASE("serve: bad requests get their status and OpenAI's error naming the field, and running streams go on") {
  REQUIRE_DEFAULT_MODEL(model);
  server::ServerOptions o = options(2, 8, 128);
  o.max_body_bytes = 4096;
  TestServer ts(*model, o);

  // A stream that runs while the bad requests come in, and must not notice them.
  const Expected want = chat_alone(*model, "Name three fruits.", greedy(*model, 16));
  Streamed beside;
  std::thread t([&] {
    beside = post_stream(ts, "/v1/chat/completions",
                         {{"messages", {{{"role", "user"}, {"content", "Name three fruits."}}}},
                          {"max_tokens", 16},
                          {"temperature", 0}});
  });

  struct Bad {
    const char* path;
    std::string body;
    int status;
    const char* param;  // "" where the error names none
  };
  const std::string user = R"({"role": "user", "content": "hi"})";
  const std::string long_text(3000, 'a');
  std::string many_words;  // 200 words: more tokens than the 128 of the context
  for (int i = 0; i < 200; ++i) many_words += " word";
  const std::vector<Bad> bad = {
      {"/v1/chat/completions", "{not json", 400, ""},
      {"/v1/chat/completions", "[1, 2]", 400, ""},
      {"/v1/chat/completions", "{}", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"temperature\": \"hot\"}", 400, "temperature"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"temperature\": 3}", 400, "temperature"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"top_p\": 0}", 400, "top_p"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"max_tokens\": -1}", 400, "max_tokens"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"max_tokens\": 1.5}", 400, "max_tokens"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"stream\": \"yes\"}", 400, "stream"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"stop\": [1]}", 400, "stop[0]"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"n\": 2}", 400, "n"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"seed\": \"x\"}", 400, "seed"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"presence_penalty\": 2.5}", 400, "presence_penalty"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"frequency_penalty\": -2.1}", 400, "frequency_penalty"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"frequency_penalty\": \"x\"}", 400,
       "frequency_penalty"},
      {"/v1/chat/completions", "{\"messages\": [" + user + "], \"max_tokens\": 200}", 400, "messages"},  // 128 ctx
      {"/v1/completions", "{}", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, -2]})", 400, "prompt[1]"},
      {"/v1/completions", R"({"prompt": [99999999]})", 400, "prompt"},
      {"/v1/completions", "{\"prompt\": \"" + many_words + "\"}", 400, "prompt"},  // longer than 128 tokens
      {"/v1/completions", "{\"prompt\": \"" + long_text + "x" + long_text + "\"}", 413, ""},   // over 4096 bytes
      {"/v1/nothing", "{}", 404, ""},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.path);
    CAPTURE(b.body.substr(0, 120));
    int status = 0;
    const json r = post_json(ts, b.path, b.body, &status);
    CHECK(status == b.status);
    REQUIRE(r.is_object());
    REQUIRE(r.contains("error"));
    CHECK(r["error"]["message"].is_string());
    CHECK(r["error"]["type"].is_string());
    if (std::string(b.param).empty()) {
      CHECK(r["error"]["param"].is_null());
    } else {
      CHECK(r["error"]["param"] == b.param);
    }
  }
  // The context error carries the counts.
  int status = 0;
  const json r = post_json(ts, "/v1/completions", "{\"prompt\": \"" + many_words + "\"}", &status);
  const std::string msg = r["error"]["message"].get<std::string>();
  CHECK(msg.find("128 tokens") != std::string::npos);
  CHECK(r["error"]["code"] == "context_length_exceeded");

  t.join();
  CHECK(beside.status == 200);
  CHECK(beside.text == want.text);
  auto m = metrics(ts);
  CHECK(m["flashscope_requests_failed_total"] == 0);
}

TEST_CASE("serve: --api-key answers 401 without the bearer token") {
  REQUIRE_DEFAULT_MODEL(model);
  server::ServerOptions o = options(1, 1);
  o.api_key = "sesame";
  TestServer ts(*model, o);
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})";
  int status = 0;
  json r = post_json(ts, "/v1/chat/completions", body, &status);
  CHECK(status == 401);
  CHECK(r["error"]["code"] == "invalid_api_key");
  r = post_json(ts, "/v1/chat/completions", body, &status, {{"Authorization", "Bearer wrong"}});
  CHECK(status == 401);
  r = post_json(ts, "/v1/chat/completions", body, &status, {{"Authorization", "Bearer sesame"}});
  CHECK(status == 200);
  httplib::Client c = ts.client();
  auto models = c.Get("/v1/models");
  REQUIRE(models);
  CHECK(models->status == 401);
  auto health = c.Get("/health");  // probes need no key
  REQUIRE(health);
  CHECK(health->status == 200);
}

TEST_CASE("serve: a soak of a few hundred small requests leaves the KV cache empty and memory at its baseline") {
  REQUIRE_DEFAULT_MODEL(model);
  TestServer ts(*model, options(4, 16, 256));
  constexpr int kThreads = 4;
  auto run = [&](int per_thread) {
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        httplib::Client c = ts.client();
        for (int i = 0; i < per_thread; ++i) {
          const bool chat = (i % 5) == 0;
          json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "Hi " + std::to_string(i)}}}}}
                           : json{{"prompt", "Number " + std::to_string(t * 1000 + i)}};
          body["max_tokens"] = i % 3 == 0 ? 2 : 1;
          body["temperature"] = i % 2 ? 0.7 : 0.0;
          auto res = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(), "application/json");
          if (res && res->status == 200) ++ok;
        }
      });
    }
    for (auto& th : threads) th.join();
    return ok.load();
  };
  CHECK(run(5) == kThreads * 5);  // warm-up: the allocator's arenas, the sessions' first pages
  auto base = metrics(ts);
  constexpr int kPerThread = 60;
  CHECK(run(kPerThread) == kThreads * kPerThread);
  auto m = metrics(ts);
  CHECK(m["flashscope_requests_completed_total"] == kThreads * (5 + kPerThread));
  CHECK(m["flashscope_requests_failed_total"] == 0);
  CHECK(m["flashscope_requests_running"] == 0);
  CHECK(m["flashscope_requests_queued"] == 0);
  CHECK(m["flashscope_kv_tokens_in_use"] == 0);
  CHECK(m["flashscope_kv_pages_in_use"] == 0);
  const double grown = m["process_resident_memory_bytes"] - base["process_resident_memory_bytes"];
  MESSAGE("resident memory after " << kThreads * kPerThread << " requests: " << grown / 1e6 << " MB more than after the warm-up");
  CHECK(grown < 16e6);
}

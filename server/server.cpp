// The HTTP side of `serve` (server.hpp): cpp-httplib's thread pool takes
// the connections, each request handler renders and encodes its prompt,
// submits it to the RequestQueue and then waits on its own Reply channel,
// which the queue's thread fills from the token and done callbacks.
//
//   handler thread                         queue thread
//   parse → encode → submit ────────────►  admit → batched steps
//   wait on Reply ◄── tokens, done ──────  on_token / on_done
//   write SSE chunks (stream) or one JSON; a failed write or a closed
//   connection → RequestQueue::cancel(id)
//
// The pool has room for every request that may run or wait plus idle
// keep-alive connections and a few for /health and /metrics, so the
// queue's bound (503), not the pool's, is what a client meets.
#include "server.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <memory>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <httplib.h>
#include <sys/socket.h>
#include <nlohmann/json.hpp>

#include "flashscope/request_queue.hpp"
#include "openai_request.hpp"
#include "reasoning_stream.hpp"

namespace flashscope::server {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e)), "application/json");
}

ApiError api_error(int status, std::string message, std::string type, std::string param = {}) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.param = std::move(param);
  return e;
}

// What a request's handler and the queue's thread share.
struct Reply {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // text not yet taken by the handler
  int tokens = 0;       // token events so far
  bool done = false;
  Result<GenerateStats> result = Status();
  Clock::time_point submitted;
  Clock::time_point first_token;
  bool has_first_token = false;
};

// A fixed-bucket histogram of seconds, Prometheus style.
struct Histogram {
  static constexpr double kBounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  uint64_t counts[std::size(kBounds)] = {};
  uint64_t count = 0;
  double sum = 0;
  void observe(double s) {
    for (size_t i = 0; i < std::size(kBounds); ++i) counts[i] += s <= kBounds[i];
    ++count;
    sum += s;
  }
  void write(std::string* out, const char* name) const {
    char line[512];
    for (size_t i = 0; i < std::size(kBounds); ++i) {
      std::snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, kBounds[i],
                    static_cast<unsigned long long>(counts[i]));
      *out += line;
    }
    std::snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                  static_cast<unsigned long long>(count), name, sum, name, static_cast<unsigned long long>(count));
    *out += line;
  }
};

// A generation request read, checked against the context and given its
// defaults: what the queue takes and what the answer reports.
struct PreparedGeneration {
  GenRequest g;
  std::vector<int32_t> prompt;
  int n_prompt = 0;
  bool chat = true;
  bool opened = false;          // the template left a <think> block open: the reply starts in it
  const char* what = "prompt";  // the field a prompt error names: "messages" or "prompt"
};

// An empty prompt, or one that leaves no room for its reply (OpenAI's error,
// word for word): the reply needs a token at least; with max_tokens, all of them.
std::optional<ApiError> prompt_size_error(const PreparedGeneration& p, int ctx) {
  const char* what = p.what;
  if (p.n_prompt == 0) return api_error(400, "the prompt is empty", "invalid_request_error", what);
  const int64_t reply_tokens = p.g.max_tokens_given ? p.g.params.max_tokens : 1;
  if (p.n_prompt + reply_tokens <= ctx) return std::nullopt;
  ApiError e = api_error(400,
                         "This model's maximum context length is " + std::to_string(ctx) +
                             " tokens. However, you requested " + std::to_string(p.n_prompt + reply_tokens) +
                             " tokens (" + std::to_string(p.n_prompt) + " in the " + what + ", " +
                             std::to_string(reply_tokens) +
                             (p.g.max_tokens_given ? " for the completion" : " at least for the completion") +
                             "). Please reduce the length of the " + what + " or completion.",
                         "invalid_request_error", what);
  e.code = "context_length_exceeded";
  return e;
}

// What every answer to one request names: its id, when it was made, the
// model, and the prompt's size for usage.
struct Completion {
  std::string id;  // "chatcmpl-N" or "cmpl-N"
  int64_t created = 0;
  std::string model;
  bool chat = true;
  int n_prompt = 0;
  bool include_usage = false;  // stream_options.include_usage

  json usage(const GenerateStats& st) const {
    return json{{"prompt_tokens", n_prompt},
                {"completion_tokens", st.generated_tokens},
                {"total_tokens", n_prompt + st.generated_tokens}};
  }
  // A whole reply's body.
  json whole(const json& choice, const GenerateStats& st) const {
    return json{{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                {"model", model}, {"choices", json::array({choice})}, {"usage", usage(st)}};
  }
  // One server-sent event of a stream; with include_usage every chunk says
  // "usage": null until the last one, which carries it alone.
  std::string chunk(json choice) const {
    choice["index"] = 0;
    if (!choice.contains("finish_reason")) choice["finish_reason"] = nullptr;
    json c = header();
    c["choices"] = json::array({choice});
    if (include_usage) c["usage"] = nullptr;
    return "data: " + dump(c) + "\n\n";
  }
  std::string usage_chunk(const GenerateStats& st) const {
    json u = header();
    u["choices"] = json::array();
    u["usage"] = usage(st);
    return "data: " + dump(u) + "\n\n";
  }

 private:
  json header() const {
    return json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                {"model", model}};
  }
};

// A whole reply's choice; a chat's text split into reasoning and content.
json whole_choice(const std::string& text, bool chat, bool opened, const GenerateStats& st) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason(st.stop_reason)}, {"logprobs", nullptr}};
  if (!chat) {
    choice["text"] = text;
    return choice;
  }
  const ReasoningSplit split = split_reply(text, opened);
  json msg = {{"role", "assistant"}, {"content", split.content}};
  if (split.has_reasoning) msg["reasoning_content"] = split.reasoning;
  choice["message"] = msg;
  return choice;
}

bool write(httplib::DataSink& sink, const std::string& s) { return sink.write(s.data(), s.size()); }

// The queue's thread fills the reply as tokens come; the handler's thread
// takes them from it.
TokenCallback reply_tokens(std::shared_ptr<Reply> reply) {
  return [reply](const TokenEvent& e) {
    std::lock_guard<std::mutex> lock(reply->mu);
    if (e.token >= 0 && !reply->has_first_token) {
      reply->first_token = Clock::now();
      reply->has_first_token = true;
    }
    if (e.token >= 0) ++reply->tokens;
    reply->pending.append(e.text.data(), e.text.size());
    reply->cv.notify_all();
    return true;
  };
}

// The reply's new text; true (and its result) once it has ended. The wait
// is short: the connection is checked between tokens too.
bool take_reply(Reply& reply, std::string* text, Result<GenerateStats>* result) {
  std::unique_lock<std::mutex> lock(reply.mu);
  reply.cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return reply.done || !reply.pending.empty(); });
  text->swap(reply.pending);
  if (reply.done) *result = reply.result;
  return reply.done;
}

// A reply as server-sent events, each chunk written as the reply grows.
// Only the request's own thread touches it (httplib's provider and done
// handler), so it needs no lock beyond the Reply's.
struct StreamedReply {
  Completion c;
  std::shared_ptr<Reply> reply;
  ReasoningStream reasoning;
  bool started = false;
  bool finished = false;  // [DONE] written: the connection's end is no disconnect

  StreamedReply(Completion c_, std::shared_ptr<Reply> reply_, bool opened)
      : c(std::move(c_)), reply(std::move(reply_)), reasoning(opened) {}

  // httplib's content provider: false ends the connection.
  bool provide(httplib::DataSink& sink) {
    if (!started) {
      started = true;
      if (c.chat && !write(sink, c.chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}}))) return false;
    }
    std::string text;
    Result<GenerateStats> result = Status();
    const bool done = take_reply(*reply, &text, &result);
    if (!sink.is_writable()) return false;
    if ((!text.empty() || done) && !write_delta(sink, text, done)) return false;
    if (!done) return true;
    if (!write_end(sink, result)) return false;
    write(sink, "data: [DONE]\n\n");
    finished = true;
    sink.done();
    return true;
  }

  // The text that became final since the last chunk, if any.
  bool write_delta(httplib::DataSink& sink, const std::string& text, bool done) {
    std::string reasoning_text, content;
    if (c.chat) {
      reasoning.push(text);
      reasoning.take(done, &reasoning_text, &content);
    } else {
      content = text;
    }
    json delta;
    if (!reasoning_text.empty()) delta["reasoning_content"] = reasoning_text;
    if (!content.empty()) delta["content"] = content;
    if (delta.empty()) return true;
    return write(sink, c.chat ? c.chunk({{"delta", delta}}) : c.chunk({{"text", content}, {"logprobs", nullptr}}));
  }

  // The finish_reason chunk and usage, or a failed reply's error event
  // (then [DONE] follows whether or not it was written).
  bool write_end(httplib::DataSink& sink, const Result<GenerateStats>& result) {
    if (!result.ok()) {
      write(sink, "data: " + dump(error_json(api_error(500, result.status().to_string(), "server_error"))) + "\n\n");
      return true;
    }
    const GenerateStats& st = result.value();
    json last = c.chat ? json{{"delta", json::object()}} : json{{"text", ""}, {"logprobs", nullptr}};
    last["finish_reason"] = finish_reason(st.stop_reason);
    if (!write(sink, c.chunk(last))) return false;
    return !c.include_usage || write(sink, c.usage_chunk(st));
  }
};

uint64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long pages_total = 0, pages_resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &pages_total, &pages_resident);
  std::fclose(f);
  return n == 2 ? pages_resident * 4096ull : 0;
}

}  // namespace

struct Server::Impl {
  Model model;
  ServerOptions options;
  ChatFormat format;
  std::unique_ptr<RequestQueue> queue;
  httplib::Server http;
  int bound_port = -1;
  socket_t listen_socket = INVALID_SOCKET;
  const int64_t created = static_cast<int64_t>(std::time(nullptr));

  std::mutex stats_mu;
  Histogram ttft;
  std::deque<std::pair<Clock::time_point, int>> recent_tokens;  // (when, tokens) of requests ended lately
  std::atomic<int64_t> http_requests{0}, bad_requests{0}, unauthorized{0}, disconnects{0};
  std::atomic<uint64_t> next_completion{1};
  std::mutex active_mu;
  std::set<uint64_t> active;  // requests a handler waits on: stop() cancels them
  std::mt19937_64 seeds{std::random_device{}()};

  static constexpr double kWindow = 10.0;  // seconds of flashscope_generated_tokens_per_second
  void prune_recent(Clock::time_point now) {  // under stats_mu
    while (!recent_tokens.empty() &&
           std::chrono::duration<double>(now - recent_tokens.front().first).count() > kWindow) {
      recent_tokens.pop_front();
    }
  }

  void routes();
  // POST /v1/chat/completions (chat) and /v1/completions, in the steps below.
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  std::optional<ApiError> prepare_generation(const std::string& body, bool chat, PreparedGeneration* p);
  DoneCallback reply_done(std::shared_ptr<Reply> reply);
  std::optional<uint64_t> submit_generation(PreparedGeneration& p, const std::shared_ptr<Reply>& reply,
                                            httplib::Response& res);
  void forget_request(uint64_t id);
  Completion new_completion(const PreparedGeneration& p);
  void answer_whole(const Completion& c, const std::shared_ptr<Reply>& reply, uint64_t id, bool opened,
                    httplib::Response& res);
  void answer_stream(Completion c, std::shared_ptr<Reply> reply, uint64_t id, bool opened, httplib::Response& res);
  void end_stream(uint64_t id, const StreamedReply& stream, bool success);
  // An error answer; the 400s count as bad requests.
  void fail(httplib::Response& res, const ApiError& e);
  std::string metrics();

  // Prompt tokens of a request, or the error to answer.
  std::optional<ApiError> prompt_tokens(const GenRequest& g, std::vector<int32_t>* out) const {
    if (g.chat) {
      auto ids = format.encode(g.messages, true);
      if (!ids.ok()) return api_error(400, "the chat template failed: " + ids.status().message(),
                                      "invalid_request_error", "messages");
      *out = std::move(ids).value();
      return std::nullopt;
    }
    if (g.prompt_is_ids) {
      *out = g.prompt_ids;
      return std::nullopt;
    }
    const Tokenizer& tok = model.tokenizer();
    if (tok.add_bos() && tok.bos_id() >= 0) out->push_back(tok.bos_id());
    const std::vector<int32_t> ids = tok.encode(g.prompt, false);
    out->insert(out->end(), ids.begin(), ids.end());
    return std::nullopt;
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  if (!impl_) return;
  impl_->http.stop();
  // The queue first: its thread may still end a request whose client left
  // (and its destructor ends the rest), and each on_done writes the stats
  // below it in Impl, which the members' own order would destroy first.
  impl_->queue.reset();
}

Result<std::unique_ptr<Server>> Server::create(const Model& model, const ServerOptions& options) {
  if (!model.loaded()) return invalid_argument("serve: no model");
  if (options.max_body_bytes == 0) return invalid_argument("serve: the body-size limit must be > 0");
  // A write to a client that has gone must fail (and cancel its request),
  // not kill the process: httplib sends without MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->options = options;
  impl->format = ChatFormat::for_model(model, options.chat_template);
  RequestQueueOptions qo;
  qo.parallel = options.parallel;
  qo.max_queued = options.max_queued;
  qo.session_tokens = options.ctx;
  auto q = RequestQueue::create(model, qo);
  if (!q.ok()) return q.status();
  impl->queue = std::move(q).value();
  // Every request that may run or wait holds a pool thread (a stream writes
  // from it); as many again for clients' idle keep-alive connections (each
  // holds its thread for httplib's keep-alive timeout), and a few more for
  // /health, /metrics and the 503s.
  const size_t threads = 2 * (static_cast<size_t>(options.parallel) + static_cast<size_t>(options.max_queued)) + 8;
  impl->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->http.set_payload_max_length(options.max_body_bytes);
  // httplib's 5 s would drop a client whose request or reading stalls that
  // long on a busy machine (CPU forward passes take every core).
  impl->http.set_read_timeout(30, 0);
  impl->http.set_write_timeout(30, 0);
  // httplib listens with a backlog of 5: a burst of clients (or a busy
  // machine whose accept loop falls behind) would overflow it and the
  // kernel drop their connections. The socket is kept to listen again
  // with a deep backlog after bind().
  Impl* raw = impl.get();
  impl->http.set_socket_options([raw](socket_t sock) {
    httplib::default_socket_options(sock);
    raw->listen_socket = sock;
  });
  impl->routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.options.host);
  } else {
    s.bound_port = s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1;
  }
  if (s.bound_port < 0) {
    return Status(StatusCode::kIoError, "serve: cannot listen on " + s.options.host + ":" +
                                            std::to_string(s.options.port) + " (in use, or not an address here)");
  }
  // listen() again on a listening socket only changes its backlog.
  if (s.listen_socket != INVALID_SOCKET) (void)::listen(s.listen_socket, SOMAXCONN);
  return Status::ok_status();
}

void Server::run() { impl_->http.listen_after_bind(); }
void Server::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->active_mu);
    for (uint64_t id : impl_->active) impl_->queue->cancel(id);
  }
  impl_->http.stop();
}
int Server::port() const { return impl_->bound_port; }
const std::string& Server::chat_format_notice() const { return impl_->format.notice(); }

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    ++http_requests;
    if (!options.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
      const std::string auth = req.get_header_value("Authorization");
      if (auth != "Bearer " + options.api_key) {
        ++unauthorized;
        ApiError e = api_error(401, "a valid API key is needed: Authorization: Bearer <key>",
                               "invalid_request_error");
        e.code = "invalid_api_key";
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses httplib sets itself (404, 413, 400 for a malformed request)
  // get OpenAI's error body too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = "error " + std::to_string(res.status);
    std::string type = "invalid_request_error";
    if (res.status == 404) msg = "no route " + req.method + " " + req.path;
    if (res.status == 413) msg = "the request body is larger than the server's limit";
    if (res.status >= 500) type = "server_error";
    send_error(res, api_error(res.status, msg, type));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what += std::string(": ") + e.what();
    } catch (...) {
    }
    send_error(res, api_error(500, what, "server_error"));
  });

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", options.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "flashscope"},
              {"max_model_len", queue->session_tokens()}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, true); });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { handle_generate(req, res, false); });
}

// A request body read and checked: the prompt's tokens, and the defaults
// that depend on the room its prompt leaves (max_tokens, a seed).
std::optional<ApiError> Server::Impl::prepare_generation(const std::string& body_text, bool chat,
                                                         PreparedGeneration* p) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::parse_error& e) {
    return api_error(400, std::string("the body is not valid JSON: ") + e.what(), "invalid_request_error");
  }
  GenRequest& g = p->g;
  g.params.sampling = default_sampling(model.sampling_defaults());  // the CLI's defaults
  if (auto e = chat ? parse_chat_request(body, &g) : parse_completion_request(body, &g)) return e;
  if (chat) {
    for (std::string& s : format.stop_strings()) g.params.stop_strings.push_back(std::move(s));  // a base model's transcript
  }
  if (auto e = prompt_tokens(g, &p->prompt)) return e;
  if (chat) {
    auto text = format.render(g.messages, true);
    p->opened = text.ok() && prompt_opens_reasoning(text.value());
  }
  p->chat = chat;
  p->n_prompt = static_cast<int>(p->prompt.size());
  p->what = chat ? "messages" : "prompt";
  const int ctx = queue->session_tokens();
  if (auto e = prompt_size_error(*p, ctx)) return e;
  if (!g.max_tokens_given) g.params.max_tokens = ctx - p->n_prompt;
  if (!g.seed_given && g.params.sampling.temperature > 0) {
    std::lock_guard<std::mutex> lock(stats_mu);
    g.params.sampling.seed = seeds();
  }
  return std::nullopt;
}

void Server::Impl::fail(httplib::Response& res, const ApiError& e) {
  if (e.status == 400) ++bad_requests;
  send_error(res, e);
}

// Ends the reply for its handler, then counts it in /metrics (time to first
// token, the tokens-per-second window).
DoneCallback Server::Impl::reply_done(std::shared_ptr<Reply> reply) {
  return [this, reply](const Result<GenerateStats>& r) {
    {
      std::lock_guard<std::mutex> lock(reply->mu);
      reply->done = true;
      reply->result = r;
      reply->cv.notify_all();
    }
    std::lock_guard<std::mutex> lock(stats_mu);
    if (reply->has_first_token) {
      ttft.observe(std::chrono::duration<double>(reply->first_token - reply->submitted).count());
    }
    if (r.ok()) recent_tokens.emplace_back(Clock::now(), r.value().generated_tokens);
    prune_recent(Clock::now());
  };
}

// The request's id in the queue, which stop() cancels until forget_request;
// none when the queue refused it and res holds the answer (503 with
// Retry-After when it is full).
std::optional<uint64_t> Server::Impl::submit_generation(PreparedGeneration& p, const std::shared_ptr<Reply>& reply,
                                                        httplib::Response& res) {
  reply->submitted = Clock::now();
  auto submitted = queue->submit(std::move(p.prompt), p.g.params, reply_tokens(reply), reply_done(reply));
  if (!submitted.ok()) {
    if (submitted.status().code() == StatusCode::kOutOfMemory) {
      res.set_header("Retry-After", "1");
      send_error(res, api_error(503, "the server is busy: " + submitted.status().message(), "server_error"));
      return std::nullopt;
    }
    fail(res, api_error(400, submitted.status().message(), "invalid_request_error", p.what));
    return std::nullopt;
  }
  const uint64_t id = submitted.value();
  std::lock_guard<std::mutex> lock(active_mu);
  active.insert(id);
  return id;
}

void Server::Impl::forget_request(uint64_t id) {
  std::lock_guard<std::mutex> lock(active_mu);
  active.erase(id);
}

// A whole reply: the queue's tokens gathered, then one JSON body.
void Server::Impl::answer_whole(const Completion& c, const std::shared_ptr<Reply>& reply, uint64_t id, bool opened,
                                httplib::Response& res) {
  std::unique_lock<std::mutex> lock(reply->mu);
  reply->cv.wait(lock, [&] { return reply->done; });
  forget_request(id);
  if (!reply->result.ok()) {
    lock.unlock();
    return send_error(res, api_error(500, reply->result.status().to_string(), "server_error"));
  }
  const GenerateStats st = reply->result.value();
  const json out = c.whole(whole_choice(reply->pending, c.chat, opened, st), st);
  lock.unlock();
  res.set_content(dump(out), "application/json");
}

// A streamed reply: httplib calls the provider from this request's thread
// until it ends the stream, then the done handler, whichever way the
// connection ended.
void Server::Impl::answer_stream(Completion c, std::shared_ptr<Reply> reply, uint64_t id, bool opened,
                                 httplib::Response& res) {
  auto stream = std::make_shared<StreamedReply>(std::move(c), std::move(reply), opened);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [stream](size_t, httplib::DataSink& sink) { return stream->provide(sink); },
      [this, id, stream](bool success) { end_stream(id, *stream, success); });
}

void Server::Impl::end_stream(uint64_t id, const StreamedReply& stream, bool success) {
  // The connection ended before the reply did: stop it, free its session.
  bool done;
  {
    std::lock_guard<std::mutex> lock(stream.reply->mu);
    done = stream.reply->done;
  }
  if (!success || !stream.finished) {
    if (!done && queue->cancel(id)) ++disconnects;
  }
  forget_request(id);
}

Completion Server::Impl::new_completion(const PreparedGeneration& p) {
  Completion c;
  c.id = (p.chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_completion++);
  c.created = static_cast<int64_t>(std::time(nullptr));
  c.model = options.model_id;
  c.chat = p.chat;
  c.n_prompt = p.n_prompt;
  c.include_usage = p.g.include_usage;
  return c;
}

void Server::Impl::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  PreparedGeneration p;
  if (auto e = prepare_generation(req.body, chat, &p)) return fail(res, *e);
  auto reply = std::make_shared<Reply>();
  const std::optional<uint64_t> id = submit_generation(p, reply, res);
  if (!id) return;
  Completion c = new_completion(p);
  if (p.g.stream) return answer_stream(std::move(c), std::move(reply), *id, p.opened, res);
  answer_whole(c, reply, *id, p.opened, res);
}

std::string Server::Impl::metrics() {
  const RequestQueueStats q = queue->stats();
  std::string out;
  char line[256];
  auto gauge = [&](const char* name, const char* help, const char* type, double v) {
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    out += line;
  };
  gauge("flashscope_http_requests_total", "HTTP requests received", "counter", static_cast<double>(http_requests));
  gauge("flashscope_requests_total", "generation requests accepted into the queue", "counter",
        static_cast<double>(q.submitted));
  gauge("flashscope_requests_rejected_total", "generation requests answered 503 (queue full)", "counter",
        static_cast<double>(q.rejected));
  gauge("flashscope_requests_completed_total", "generation requests ended (any reason)", "counter",
        static_cast<double>(q.completed));
  gauge("flashscope_requests_cancelled_total", "generation requests cancelled (client gone)", "counter",
        static_cast<double>(q.cancelled));
  gauge("flashscope_requests_failed_total", "generation requests ended by an engine error", "counter",
        static_cast<double>(q.failed));
  gauge("flashscope_client_disconnects_total", "streams whose client left before the reply ended", "counter",
        static_cast<double>(disconnects));
  gauge("flashscope_bad_requests_total", "requests answered 400", "counter", static_cast<double>(bad_requests));
  gauge("flashscope_unauthorized_total", "requests answered 401", "counter", static_cast<double>(unauthorized));
  gauge("flashscope_requests_running", "requests decoding now", "gauge", q.running);
  gauge("flashscope_requests_queued", "requests waiting for a slot", "gauge", q.queued);
  gauge("flashscope_slots", "requests decoded together at most (--parallel)", "gauge", q.parallel);
  gauge("flashscope_prompt_tokens_total", "prompt tokens prefilled", "counter", static_cast<double>(q.prompt_tokens));
  gauge("flashscope_generated_tokens_total", "tokens generated", "counter", static_cast<double>(q.generated_tokens));
  gauge("flashscope_batch_steps_total", "batched decode steps", "counter", static_cast<double>(q.steps));
  gauge("flashscope_kv_tokens_in_use", "tokens the slots' KV caches hold", "gauge", q.kv_tokens);
  gauge("flashscope_kv_pages_in_use", "64-token KV pages the slots hold", "gauge", q.kv_pages);
  gauge("process_resident_memory_bytes", "resident memory of the server", "gauge",
        static_cast<double>(resident_bytes()));
  std::lock_guard<std::mutex> lock(stats_mu);
  prune_recent(Clock::now());
  double tokens = 0;
  for (const auto& [t, n] : recent_tokens) tokens += n;
  gauge("flashscope_generated_tokens_per_second", "tokens of the requests that ended in the last 10 s, per second",
        "gauge", tokens / kWindow);
  out += "# HELP flashscope_time_to_first_token_seconds from the request's arrival to its first token\n"
         "# TYPE flashscope_time_to_first_token_seconds histogram\n";
  ttft.write(&out, "flashscope_time_to_first_token_seconds");
  return out;
}

}  // namespace flashscope::server

// `flashscope-cli serve`: an OpenAI-compatible HTTP server over the engine's
// RequestQueue (flashscope/request_queue.hpp), so any OpenAI client talks to
// a local model; the same API is served by vLLM and SGLang.
//
//   POST /v1/chat/completions   messages rendered with the model's chat template;
//                               stream (server-sent events) or one JSON reply
//   POST /v1/completions        a prompt as it is
//   GET  /v1/models, /health, /metrics (Prometheus text)
//
// Every running request decodes in the same batched step; past --parallel
// they wait in a bounded queue, past --queue the answer is 503 with
// Retry-After. A client that disconnects mid-stream cancels its request and
// frees its session. Bad input is a 400 in OpenAI's error shape naming the
// field. A front-end: public headers only (docs/ARCHITECTURE.md).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "flashscope/engine.hpp"

namespace flashscope::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8080;                 // 0: any free port (port() says which)
  int parallel = 4;                // requests decoded together
  int max_queued = 16;             // requests that may wait beyond those
  int ctx = 0;                     // tokens per request (prompt + reply); 0: the model's context length
  std::string api_key;             // non-empty: /v1/* needs "Authorization: Bearer <api_key>"
  size_t max_body_bytes = 1 << 20; // larger bodies: 413
  std::string model_id = "default";  // what /v1/models lists and replies name
  std::string chat_template;       // Jinja source that replaces the model's; empty: the model's
};

class Server {
 public:
  // Loads nothing, binds nothing: makes the queue (kInvalidArgument for
  // options out of range, as RequestQueue::create) and the routes.
  static Result<std::unique_ptr<Server>> create(const Model& model, const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (kIoError when it cannot); then port() is the port.
  Status bind();
  // Serves until stop(); call after bind().
  void run();
  // Thread-safe; run() returns soon after.
  void stop();
  int port() const;
  // The chat format's notice (a fallback from the model's template), or "".
  const std::string& chat_format_notice() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashscope::server

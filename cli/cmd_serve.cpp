// flashscope-cli serve: the OpenAI-compatible server (server/server.hpp) on
// a model, until SIGINT or SIGTERM.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "engine_args.hpp"
#include "flashscope/device.hpp"
#include "server.hpp"

namespace flashscope::cli {

namespace {

const char* const kUsage =
    "usage: flashscope-cli serve [-m PATH] [--host 127.0.0.1] [--port 8080] [--parallel N] [--queue N]\n"
    "                            [--ctx N] [--device cpu|cuda] [-t N] [--api-key KEY] [--chat-template FILE]\n"
    "                            [--max-body BYTES] [--model-id NAME] [--kv-type bf16|q8_0|q4_0]\n\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health,\n"
    "/metrics (Prometheus). Point any OpenAI client at http://HOST:PORT/v1.\n\n"
    "  -m, --model PATH       GGUF model (default: the SmolLM2-135M-Instruct in assets/models)\n"
    "  --host ADDR            address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)\n"
    "  --port N               port (default 8080; 0: any free port, printed)\n"
    "  --parallel N           requests decoded together in one batched step (default 4)\n"
    "  --queue N              requests that may wait beyond those; more get 503 with Retry-After (default 16)\n"
    "  --ctx N                tokens per request, prompt and reply (default: the model's context length)\n"
    "  --device cpu|cuda      where to run (default: cuda when a device is present)\n"
    "  -t, --threads N        CPU threads per forward pass (default: the physical cores not busy elsewhere)\n"
    "  --api-key KEY          require \"Authorization: Bearer KEY\" on /v1/* (401 without it)\n"
    "  --chat-template FILE   a Jinja chat template instead of the model's\n"
    "  --max-body BYTES       largest request body (default 1048576; larger: 413)\n"
    "  --model-id NAME        the model's name in /v1/models and replies (default: the file's name)\n"
    "  --kv-type bf16|q8_0|q4_0  cpu: KV cache elements in bf16 (default), q8_0 (int8 blocks of 32 with a\n"
    "                         scale) or q4_0 (4-bit codes: half q8_0's bytes, at some cost in agreement)\n";

std::string read_file(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  *ok = static_cast<bool>(f) || f.eof();
  return s.str();
}

std::string file_stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string ext = ".gguf";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) {
    name.resize(name.size() - ext.size());
  }
  return name;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::vector<std::string> storage = expand_short_flags(argc, argv);
  std::vector<char*> av;
  for (std::string& s : storage) av.push_back(s.data());
  Args args(static_cast<int>(av.size()), av.data(),
            {"model", "host", "port", "parallel", "queue", "ctx", "device", "threads", "api-key", "chat-template",
             "max-body", "model-id", "kv-type"},
            {"help"});
  if (!args.ok() || args.has("help")) {
    const bool usage_error = !args.ok();
    std::fprintf(usage_error ? stderr : stdout, "%s%s%s", args.error().c_str(), args.error().empty() ? "" : "\n",
                 kUsage);
    return usage_error ? 2 : 0;
  }
  if (!args.positional().empty()) {
    std::fprintf(stderr, "flashscope-cli serve: unexpected argument '%s'\n%s", args.positional()[0].c_str(), kUsage);
    return 2;
  }
  server::ServerOptions so;
  so.host = args.get("host", "127.0.0.1");
  so.port = static_cast<int>(args.get_int_in("port", 8080, 0, 65535));
  so.parallel = static_cast<int>(args.get_int_in("parallel", 4, 1, 1024));
  so.max_queued = static_cast<int>(args.get_int_in("queue", 16, 0, 100000));
  so.ctx = parse_ctx(args);
  so.api_key = args.get("api-key");
  so.max_body_bytes = static_cast<size_t>(args.get_int_in("max-body", 1 << 20, 1, 1ll << 30));
  const int threads = parse_threads(args, "serve");
  const std::string device = args.get("device", cuda_available() ? "cuda" : "cpu");
  const KvType kv_type = parse_kv_type_flag(args);
  if (args.has("api-key") && so.api_key.empty()) args.fail("--api-key must not be empty");
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n%s", args.error().c_str(), kUsage);
    return 2;
  }
  ModelOptions mo;
  mo.threads = threads;
  mo.kv_type = kv_type;
  if (device == "cpu") {
    mo.device = Device::kCpu;
  } else if (device == "cuda") {
    mo.device = Device::kCuda;
  } else {
    std::fprintf(stderr, "flashscope-cli serve: --device must be cpu or cuda, not '%s'\n", device.c_str());
    return 2;
  }
  if (args.has("chat-template")) {
    bool ok = false;
    so.chat_template = read_file(args.get("chat-template"), &ok);
    if (!ok) {
      std::fprintf(stderr, "flashscope-cli serve: cannot read %s\n", args.get("chat-template").c_str());
      return 1;
    }
  }
  const std::string path = resolve_model_path(args);
  if (path.empty()) {
    std::fputs(missing_model_message("serve").c_str(), stderr);
    return 1;
  }
  so.model_id = args.get("model-id", file_stem(path));
  auto model = Model::load(path, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "flashscope-cli serve: cannot load %s: %s\n", path.c_str(),
                 model.status().to_string().c_str());
    return 1;
  }
  if (!check_ctx_fits(so.ctx, *model, "serve")) return 2;

  // SIGINT and SIGTERM go to a thread that stops the server (blocked here
  // first, so that every thread started below inherits the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = server::Server::create(*model, so);
  if (!server.ok()) {
    std::fprintf(stderr, "flashscope-cli serve: %s\n", server.status().to_string().c_str());
    return 1;
  }
  if (!(*server)->chat_format_notice().empty()) {
    std::fprintf(stderr, "flashscope-cli serve: note: %s\n", (*server)->chat_format_notice().c_str());
  }
  const Status bound = (*server)->bind();
  if (!bound.ok()) {
    std::fprintf(stderr, "flashscope-cli serve: %s\n", bound.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr,
               "flashscope-cli serve: %s on %s, %d parallel, queue %d; listening on http://%s:%d/v1 "
               "(OpenAI API; /health, /metrics)\n",
               so.model_id.c_str(), device.c_str(), so.parallel, so.max_queued, so.host.c_str(), (*server)->port());
  // The port on stdout alone, for scripts that start the server on port 0.
  std::printf("%d\n", (*server)->port());
  std::fflush(stdout);

  server::Server* s = server->get();
  std::thread stopper([s, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    s->stop();
  });
  s->run();
  // run() returned on a signal (the stopper then is done) or on its own
  // failure; then wake the stopper with a signal of its own set.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  std::fprintf(stderr, "flashscope-cli serve: stopped\n");
  return 0;
}

}  // namespace flashscope::cli

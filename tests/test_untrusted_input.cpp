// Files and numbers from outside (issue #26): each case is one hole a fuzzer
// or a crafted file found, kept closed. Thread counts are bounded; a model's
// layer table is bounded by the tensors the file holds before it is
// allocated; GgufFile's size arithmetic is checked for every dimension;
// special files (FIFOs, directories) are refused before anything blocks on
// them; `trace info` counts tiles without int overflow.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flashscope/flashscope.h"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "flashscope/trace.hpp"
#include "flashscope/untrusted.hpp"
#include "npy.hpp"
#include "support/gguf_builder.hpp"
#include "support/synthetic_llama.hpp"
#include "support/temp_path.hpp"

#if FLASHSCOPE_TEST_CLI
#include "commands.hpp"
#endif

using namespace flashscope;
using flashscope::testing::GgufBuilder;
using flashscope::testing::SyntheticLlama;

namespace {

std::string temp_path(const std::string& name) { return flashscope::testing::temp_path("untrusted", name); }

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A FIFO with no writer: opening it for reading blocks until one comes.
struct Fifo {
  std::string path;
  explicit Fifo(const std::string& name) : path(temp_path(name)) {
    ::unlink(path.c_str());
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  }
  ~Fifo() { ::unlink(path.c_str()); }
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
};

// Runs open_it() on another thread and says whether it returned within a few
// seconds. A reader stuck in open() is released by opening the write end, so
// a failing check never leaves the suite hanging.
template <typename F>
bool returns_promptly(const Fifo& fifo, F open_it) {
  auto done = std::async(std::launch::async, open_it);
  if (done.wait_for(std::chrono::seconds(3)) == std::future_status::ready) {
    done.get();
    return true;
  }
  const int fd = ::open(fifo.path.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);
  done.wait();
  return false;
}

// A directory to pass where a file belongs.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) : path(temp_path(name)) { REQUIRE(::mkdir(path.c_str(), 0700) == 0); }
  ~TempDir() { ::rmdir(path.c_str()); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

#if FLASHSCOPE_TEST_CLI
int run_cli(int (*cmd)(int, char**), std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return cmd(static_cast<int>(argv.size()), argv.data());
}

// Runs a command with its stdout sent to a file; returns what it printed.
std::string cli_stdout(int (*cmd)(int, char**), std::vector<std::string> args, int* rc) {
  const std::string out_path = temp_path("stdout.txt");
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, STDOUT_FILENO);
  ::close(fd);
  *rc = run_cli(cmd, std::move(args));
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  std::ifstream in(out_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(out_path.c_str());
  return text;
}
#endif

}  // namespace

TEST_CASE("untrusted input: thread counts above kMaxThreads are refused (C++ API and C ABI)") {
  const std::string path = temp_path("threads.gguf");
  write_file(path, SyntheticLlama().build());

  ModelOptions mo;
  mo.threads = kMaxThreads;
  CHECK(Model::load(path, mo).ok());
  for (int threads : {kMaxThreads + 1, 100000, 2147483647}) {
    CAPTURE(threads);
    mo.threads = threads;
    auto model = Model::load(path, mo);
    REQUIRE_FALSE(model.ok());
    CHECK(model.status().code() == StatusCode::kInvalidArgument);
    CHECK(contains(model.status().message(), std::to_string(kMaxThreads)));
  }

  flashscope_model_params p = flashscope_model_default_params();
  p.n_threads = 100000;
  flashscope_model* m = nullptr;
  CHECK(flashscope_model_load(path.c_str(), &p, &m) == FLASHSCOPE_INVALID_ARGUMENT);
  CHECK(m == nullptr);
  CHECK(contains(flashscope_last_error(), "n_threads"));
  p.n_threads = 2;
  REQUIRE(flashscope_model_load(path.c_str(), &p, &m) == FLASHSCOPE_OK);
  flashscope_model_free(m);

#if FLASHSCOPE_TEST_CLI
  // -t values that do not fit an int are refused, not truncated (2^32 + 1 became 1).
  for (const char* t : {"4294967297", "1025", "-1"}) {
    CAPTURE(t);
    CHECK(run_cli(cli::cmd_generate, {"-m", path, "-p", "hi", "-n", "1", "--device", "cpu", "-t", t}) == 2);
  }
#endif
  std::remove(path.c_str());
}

TEST_CASE("untrusted input: a huge block_count is refused before the layer table is allocated") {
  for (uint64_t layers : {uint64_t{1} << 23, uint64_t{1} << 30}) {
    CAPTURE(layers);
    SyntheticLlama s;
    s.skip_keys.insert("llama.block_count");
    s.extra = [layers](GgufBuilder& b) { b.add_u32("llama.block_count", static_cast<uint32_t>(layers)); };
    auto file = GgufFile::from_buffer(s.build());
    REQUIRE(file.ok());
    auto model = Model::from_gguf(std::move(file).value());
    REQUIRE_FALSE(model.ok());
    // Not "out of memory", not a missing tensor found after a 3 GB table: the count itself.
    CHECK(model.status().code() == StatusCode::kCorruptData);
    CHECK(contains(model.status().message(), "block_count " + std::to_string(layers)));
  }
}

TEST_CASE("untrusted input: GgufFile checks the byte size and the row count of every shape") {
  auto open_with = [](const std::vector<uint64_t>& ne, GgmlType type) {
    GgufBuilder b;
    b.add_tensor("t", type, ne, {});
    return GgufFile::from_buffer(b.build());
  };
  // (ne0 / block) * type_size overflowed: an F32 ne0 of 2^62 + 1 "opened" with a size of 4 bytes.
  auto big = open_with({(uint64_t{1} << 62) + 1}, GgmlType::kF32);
  REQUIRE_FALSE(big.ok());
  CHECK(contains(big.status().message(), "byte size"));
  auto big_q = open_with({uint64_t{1} << 62, 2}, GgmlType::kQ8_0);
  CHECK_FALSE(big_q.ok());

  // A zero dimension made the later ones skip the check: n_rows() overflowed.
  for (const std::vector<uint64_t>& ne : std::vector<std::vector<uint64_t>>{
           {0, uint64_t{1} << 40, uint64_t{1} << 40},
           {32, 0, uint64_t{1} << 40, uint64_t{1} << 40},
           {0, uint64_t{1} << 62, 4}}) {
    CAPTURE(ne.size());
    auto f = open_with(ne, GgmlType::kF32);
    REQUIRE_FALSE(f.ok());
    CHECK(contains(f.status().message(), "overflows"));
  }
  // Zeros with sane neighbours still open, and their counts are exact.
  auto ok = open_with({0, 1u << 20, 3}, GgmlType::kF32);
  REQUIRE_MESSAGE(ok.ok(), ok.status().message());
  CHECK(ok->tensors()[0].n_rows() == 3 << 20);
  CHECK(ok->tensors()[0].n_elements() == 0);
  CHECK(ok->tensors()[0].size == 0);
}

TEST_CASE("untrusted input: FIFOs and directories are refused before any blocking open") {
  {
    Fifo fifo("model.fifo");
    Status s;
    CHECK(returns_promptly(fifo, [&] { s = GgufFile::open(fifo.path).status(); }));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(contains(s.message(), "not a regular file"));
  }
  {
    Fifo fifo("model_load.fifo");
    Status s;
    CHECK(returns_promptly(fifo, [&] { s = Model::load(fifo.path).status(); }));
    CHECK(s.code() == StatusCode::kIoError);
  }
  {
    Fifo fifo("trace.fifo");
    Status s;
    CHECK(returns_promptly(fifo, [&] { s = read_trace(fifo.path).status(); }));
    CHECK(s.code() == StatusCode::kIoError);
    CHECK(contains(s.message(), "FIFO"));
  }
  {
    // A directory as a trace path was "cannot allocate 9223372036854775807 bytes".
    TempDir dir("trace_dir");
    auto t = read_trace(dir.path);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == StatusCode::kIoError);
    CHECK(contains(t.status().message(), "is a directory"));
    auto g = GgufFile::open(dir.path);
    REQUIRE_FALSE(g.ok());
    CHECK(contains(g.status().message(), "is a directory"));
  }
  {
    auto t = read_trace("/dev/null");
    REQUIRE_FALSE(t.ok());
    CHECK(contains(t.status().message(), "device"));
  }
#if FLASHSCOPE_TEST_CLI
  {
    Fifo fifo("cli_trace.fifo");
    int rc = -1;
    CHECK(returns_promptly(fifo, [&] { rc = run_cli(cli::cmd_trace, {"info", fifo.path}); }));
    CHECK(rc == 1);
  }
#endif
}

#if FLASHSCOPE_TEST_CLI
TEST_CASE("untrusted input: chat template and messages files are read whole only when regular and small") {
  {
    Fifo fifo("template.fifo");
    Result<std::string> r = std::string();
    CHECK(returns_promptly(fifo, [&] { r = read_small_file(fifo.path); }));
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.status().message(), "FIFO"));
  }
  {
    TempDir dir("template_dir");
    auto r = read_small_file(dir.path);
    REQUIRE_FALSE(r.ok());
    CHECK(contains(r.status().message(), "is a directory"));
  }
  const std::string path = temp_path("template.jinja");
  write_file(path, std::vector<uint8_t>(100, 'x'));
  auto whole = read_small_file(path);
  REQUIRE(whole.ok());
  CHECK(*whole == std::string(100, 'x'));
  auto big = read_small_file(path, 99);
  REQUIRE_FALSE(big.ok());
  CHECK(contains(big.status().message(), "100 bytes"));
  CHECK_FALSE(read_small_file(temp_path("missing.jinja")).ok());
  ::unlink(path.c_str());
#if FLASHSCOPE_TEST_CLI
  {
    Fifo fifo("cli_messages.fifo");
    int rc = -1;
    CHECK(returns_promptly(fifo, [&] {
      rc = run_cli(cli::cmd_chat_template, {"--chat-template", fifo.path, "--messages", fifo.path});
    }));
    CHECK(rc == 1);
  }
#endif
}

TEST_CASE("untrusted input: trace info counts the tiles of the longest valid q_len without overflow") {
  Trace t;
  t.meta.backend = "cpu";
  t.meta.head_dim = 64;
  t.meta.q_len = 0x7fffffff;
  t.meta.kv_len = 0x7fffffff;
  t.meta.block_q = t.meta.block_kv = 64;
  t.meta.softmax_scale = 0.125f;
  const std::string path = temp_path("long.fstrace");
  REQUIRE(write_trace(t, path).ok());
  int rc = -1;
  const std::string out = cli_stdout(cli::cmd_trace, {"info", path}, &rc);
  CHECK(rc == 0);
  // ceil((2^31 - 1) / 64) = 33554432 in each direction.
  CHECK_MESSAGE(contains(out, "33554432 q-tiles x 33554432 kv-tiles"), out);
  std::remove(path.c_str());
}
#endif

// --- clarity: what a bad file is told, in words that name the fault ----------

TEST_CASE("untrusted input: a tokenizer.ggml.pre of another type is named as such, not as '(none)'") {
  SyntheticLlama s;
  s.skip_keys.insert("tokenizer.ggml.pre");
  s.extra = [](GgufBuilder& b) { b.add_u32("tokenizer.ggml.pre", 7); };
  auto model = Model::from_gguf(GgufFile::from_buffer(s.build()).value());
  REQUIRE_FALSE(model.ok());
  CHECK(model.status().code() == StatusCode::kCorruptData);
  CHECK_MESSAGE(contains(model.status().message(), "'tokenizer.ggml.pre' is u32, expected a string"),
                model.status().message());
}

TEST_CASE("untrusted input: names from the file are echoed with control bytes escaped") {
  SyntheticLlama s;
  s.string_override["general.architecture"] = "lla\x1b[2Jma\n";
  auto model = Model::from_gguf(GgufFile::from_buffer(s.build()).value());
  REQUIRE_FALSE(model.ok());
  CHECK_MESSAGE(contains(model.status().message(), "'lla\\x1b[2Jma\\n'"), model.status().message());
  CHECK_FALSE(contains(model.status().message(), "\x1b"));

  GgufBuilder b;
  b.add_u32("key\x07\r", 1).add_u32("key\x07\r", 2);
  auto f = GgufFile::from_buffer(b.build());
  REQUIRE_FALSE(f.ok());
  CHECK_MESSAGE(contains(f.status().message(), "'key\\x07\\r'"), f.status().message());
}

TEST_CASE("untrusted input: token types outside 1..6 are refused, I64 ones before narrowing") {
  for (int64_t bad : {int64_t{0}, int64_t{7}, (int64_t{1} << 32) + 1, int64_t{-1}}) {
    CAPTURE(bad);
    SyntheticLlama s;
    s.skip_keys.insert("tokenizer.ggml.token_type");
    s.extra = [&](GgufBuilder& b) {
      std::vector<int64_t> types(static_cast<size_t>(s.vocab), 1);
      types[5] = bad;
      b.add_int_array("tokenizer.ggml.token_type", GgufValueType::kI64, types);
    };
    auto model = Model::from_gguf(GgufFile::from_buffer(s.build()).value());
    REQUIRE_FALSE(model.ok());
    CHECK(model.status().code() == StatusCode::kCorruptData);
    CHECK_MESSAGE(contains(model.status().message(), "token_type[5] = " + std::to_string(bad)),
                  model.status().message());
  }
  auto t = Tokenizer::create({"a", "b"}, {1, 9}, {}, {});
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(t.status().message(), "token 1 has type 9"));
}

TEST_CASE("untrusted input: NaN and infinite weights are found at load, naming the tensor") {
  const std::vector<uint8_t> good = SyntheticLlama().build();
  // The file with one value of `tensor` replaced by `bits` at byte `at` of its data.
  auto poisoned = [&](const char* tensor, uint64_t at, std::vector<uint8_t> bits) {
    auto f = GgufFile::from_memory(good.data(), good.size());
    REQUIRE(f.ok());
    const GgufTensor* t = f->find_tensor(tensor);
    REQUIRE(t != nullptr);
    std::vector<uint8_t> bytes = good;
    const size_t offset = static_cast<size_t>(static_cast<const uint8_t*>(t->data) - good.data() + at);
    for (size_t i = 0; i < bits.size(); ++i) bytes[offset + i] = bits[i];
    return bytes;
  };
  struct Case {
    const char* tensor;
    uint64_t at;
    std::vector<uint8_t> bits;
  };
  const Case cases[] = {
      {"output_norm.weight", 8, {0x00, 0x00, 0xc0, 0x7f}},      // F32 NaN, column 2
      {"blk.1.ffn_norm.weight", 0, {0x00, 0x00, 0x80, 0xff}},   // F32 -inf
      {"blk.1.attn_q.weight", 20 * 3, {0x00, 0x7c}},            // Q4_1 scale d = +inf, 4th block
      {"blk.0.ffn_down.weight", 2, {0x01, 0x7e}},               // Q4_1 min m = NaN
      {"token_embd.weight", 34 * 2, {0x00, 0xfe}},              // Q8_0 scale NaN
  };
  for (const Case& c : cases) {
    CAPTURE(c.tensor);
    const std::vector<uint8_t> bytes = poisoned(c.tensor, c.at, c.bits);
    auto model = Model::from_gguf(GgufFile::from_buffer(bytes).value());
    REQUIRE_FALSE(model.ok());
    CHECK(model.status().code() == StatusCode::kCorruptData);
    CHECK_MESSAGE(contains(model.status().message(), std::string("tensor '") + c.tensor + "' has a NaN or infinite"),
                  model.status().message());
    ModelOptions trusting;
    trusting.check_weights = WeightCheck::kNever;
    CHECK(Model::from_gguf(GgufFile::from_buffer(bytes).value(), trusting).ok());
  }
  // A file on disk is checked once per process unless asked for every time.
  const std::string path = temp_path("nan.gguf");
  write_file(path, poisoned("output_norm.weight", 0, {0x00, 0x00, 0xc0, 0x7f}));
  CHECK_FALSE(Model::load(path).ok());
  CHECK_FALSE(Model::load(path).ok());  // a failed check does not mark the file as seen
  std::remove(path.c_str());
  write_file(path, good);
  CHECK(Model::load(path).ok());
  ModelOptions always;
  always.check_weights = WeightCheck::kAlways;
  CHECK(Model::load(path, always).ok());
  std::remove(path.c_str());
}

TEST_CASE("untrusted input: encode_checked reports a byte no token spells; encode drops it") {
  auto t = Tokenizer::create({"a", "b", "<|x|>"}, {1, 1, 3}, {}, {});
  REQUIRE(t.ok());
  CHECK(t->encode("abc", false) == std::vector<int32_t>{0, 1});
  auto r = t->encode_checked("ab<|x|>c", true);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK_MESSAGE(contains(r.status().message(), "byte 0x63 at offset 7"), r.status().message());
  auto ok = t->encode_checked("ab<|x|>", true);
  REQUIRE(ok.ok());
  CHECK(ok.value() == std::vector<int32_t>{0, 1, 2});
}

// Found by fuzz_npy: a zero dimension let the others skip the overflow check,
// so numel() overflowed (UBSan) on a file that parsed.
TEST_CASE("untrusted input: .npy shapes with a zero still have their other dimensions checked") {
  auto npy = [](const std::string& shape) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    header.resize(((10 + header.size() + 1 + 63) / 64) * 64 - 10 - 1, ' ');
    header += '\n';
    std::string file = std::string("\x93NUMPY\x01\x00", 8);
    file += static_cast<char>(header.size() & 0xff);
    file += static_cast<char>(header.size() >> 8);
    return file + header;
  };
  const std::string big = std::to_string(int64_t{1} << 40);
  for (const std::string& shape : {"(" + big + ", " + big + ", 0)", "(0, " + big + ", " + big + ")"}) {
    CAPTURE(shape);
    const std::string file = npy(shape);
    auto a = cli::parse_npy(file.data(), file.size());
    REQUIRE_FALSE(a.ok());
    CHECK_MESSAGE(contains(a.status().message(), "too large"), a.status().message());
  }
  const std::string empty = npy("(" + big + ", 0, 3)");
  auto a = cli::parse_npy(empty.data(), empty.size());
  REQUIRE_MESSAGE(a.ok(), a.status().message());
  CHECK(a->numel() == 0);
  cli::NpyArray hand;
  hand.shape = {int64_t{1} << 40, int64_t{1} << 40, 0};
  CHECK(hand.numel() == -1);
}

// The chat-template interpreter on arbitrary templates and message text: the
// input up to its first NUL byte is the template, the rest the content of the
// conversation's messages. Parsing and rendering may fail, but only with a
// status: never a crash, a hang or unbounded memory (the limits bound depth,
// loop iterations, output and work), and a render never outgrows its limit.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "flashscope/chat_template.hpp"

using namespace flashscope;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string_view source = all.substr(0, nul);
  const std::string content(nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1));

  ChatTemplateLimits limits;
  limits.max_loop_iterations = 10000;  // smaller than the defaults, so one input stays well under the timeout
  limits.max_output_bytes = 1 << 16;
  limits.max_work_bytes = 1 << 22;
  auto tmpl = ChatTemplate::parse(source, limits);
  if (!tmpl.ok()) {
    if (tmpl.status().message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  ChatTemplateInput in;
  in.messages = {{"system", content}, {"user", content}, {"assistant", TemplateValue()}, {"user", "?"}};
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.variables = {{"tools", TemplateValue::list({TemplateValue(content)})}, {"enable_thinking", true}};
  in.now = [] {
    std::tm t{};
    t.tm_year = 126;
    t.tm_mon = 2;
    t.tm_mday = 5;
    return t;
  };
  auto out = tmpl->render(in);
  if (out.ok() && out->size() > limits.max_output_bytes) __builtin_trap();
  if (!out.ok() && out.status().message().empty()) __builtin_trap();
  return 0;
}

// Chat template inputs from JSON (what `flashscope-cli chat-template
// --messages FILE` reads, and the fixtures of tests/data/chat_templates/):
// either a list of messages, or an object with "messages" and, optionally,
// "add_generation_prompt", "bos_token", "eos_token" and any further
// variables ("tools", "enable_thinking", ...). A message is an object with
// "role", "content" and any extra fields, kept in file order (ordered_json),
// as a Python dict keeps them, so `tojson` writes them in the same order.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "flashscope/chat_template.hpp"

namespace flashscope::cli {

TemplateValue template_value_from_json(const nlohmann::ordered_json& j);

// kInvalidArgument naming what is malformed (a message without a role, ...).
// Keys the object form may hold that are not template variables ("name",
// "template", "expected": the fixtures' own) are skipped.
Result<ChatTemplateInput> chat_input_from_json(const nlohmann::ordered_json& j);

// Reads and parses a file; kIoError when it cannot be read, kInvalidArgument
// when it is not JSON of the form above.
Result<ChatTemplateInput> read_chat_input(const std::string& path);

}  // namespace flashscope::cli

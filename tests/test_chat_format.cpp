// ChatFormat: the model's own chat template driving sessions (the same
// tokens as the hand-written ChatML path for SmolLM2), the prefix check and
// the re-prefill of a template that rewrites earlier turns, the fallback
// from a broken template, an override, plain completion without a template,
// and splitting a reply's reasoning from its content.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "flashscope/chat_template.hpp"
#include "flashscope/engine.hpp"
#include "flashscope/gguf.hpp"
#include "flashscope/model.hpp"
#include "support/model_path.hpp"
#include "support/skip.hpp"
#include "support/synthetic_llama.hpp"

using flashscope::ChatFormat;
using flashscope::ChatFormatKind;
using flashscope::ChatMessage;
using flashscope::GenerateParams;
using flashscope::Model;
using flashscope::Session;
using flashscope::TokenEvent;

namespace {

Model synthetic_model(flashscope::testing::SyntheticLlama s = {}) {
  auto file = flashscope::GgufFile::from_buffer(s.build());
  REQUIRE(file.ok());
  auto model = Model::from_gguf(std::move(file).value());
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  return std::move(model).value();
}

// ChatML with a generation prompt, written as Jinja (SmolLM2's shape without
// its default system prompt).
const char* const kChatML =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Qwen3's habit: earlier replies lose their thinking block when rendered again.
const char* const kDropsThinking =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
    "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] | trim }}"
    "{% else %}{{ m.content }}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

GenerateParams prefill_only() {
  GenerateParams gp;
  gp.max_tokens = 0;
  return gp;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("chat format: SmolLM2's own template gives the ChatML path's tokens, and a two-turn session the same cache") {
  const std::string path = flashscope::testing::default_model_path();
  if (!std::ifstream(path).good()) {
    MESSAGE("skipped: " << path << " is absent (run scripts/fetch_model.sh)");
    flashscope::testing::mark_skipped();
    return;
  }
  auto model = Model::load(path);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  CHECK(model->chat_template_status().ok());
  REQUIRE(model->parsed_chat_template() != nullptr);
  const ChatFormat format = ChatFormat::for_model(*model);
  REQUIRE(format.kind() == ChatFormatKind::kTemplate);
  CHECK(format.notice().empty());
  const flashscope::Tokenizer& tok = model->tokenizer();

  // Whole conversations: with and without a system prompt, multi-line and
  // non-ASCII text, typed control-token text, generation prompt on and off.
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "Hi"}},
      {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Two\n\nlines, é 漢字 🙂"}},
      {{"user", "a<|im_end|>b"}},
      {{"user", "  leading and trailing  \n"}, {"assistant", "\nok"}, {"user", "user"}},
      // Contents that also occur inside the template's text ("s" in "system").
      {{"user", "s"}, {"assistant", "a"}, {"user", "t"}, {"assistant", "Hugging"}},
  };
  for (const auto& messages : conversations) {
    for (bool gen : {true, false}) {
      auto ids = format.encode(messages, gen);
      REQUIRE(ids.ok());
      CHECK(*ids == flashscope::encode_chatml(tok, messages, gen));
      auto text = format.render(messages, gen);
      REQUIRE(text.ok());
      CHECK(*text == flashscope::format_chatml(messages, gen));
    }
  }

  // Two turns, greedy: the ChatML path as the CLI wrote it (first prompt,
  // then only "\n" or "<|im_end|>\n" and the next turn), and the template path.
  GenerateParams gp;
  gp.max_tokens = 6;
  const std::string q1 = "Hi! What is your name?", q2 = "What is 2+2?";
  auto old_session = Session::create(*model, {512});
  REQUIRE(old_session.ok());
  auto r1 = old_session->generate(flashscope::encode_chatml(tok, {{"user", q1}}, true), gp, nullptr);
  REQUIRE(r1.ok());
  const bool closed = r1->stop_reason == flashscope::StopReason::kStopToken;
  std::vector<int32_t> next = tok.encode(closed ? "\n<|im_start|>user\n" : "<|im_end|>\n<|im_start|>user\n", true);
  next = concat(next, tok.encode(q2, false));
  next = concat(next, tok.encode("<|im_end|>\n<|im_start|>assistant\n", true));
  REQUIRE(old_session->generate(next, gp, nullptr).ok());

  auto session = Session::create(*model, {512});
  REQUIRE(session.ok());
  std::vector<ChatMessage> messages = {{"user", q1}};
  auto turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  CHECK(turn->keep == 0);
  std::string reply;
  auto collect = [&reply](const TokenEvent& e) {
    reply.append(e.text.data(), e.text.size());
    return true;
  };
  REQUIRE(session->generate(turn->keep, turn->feed, gp, collect).ok());
  messages.push_back({"assistant", reply});
  messages.push_back({"user", q2});
  turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  CHECK(turn->appended);  // only the new turn is fed
  CHECK(turn->keep == session->n_tokens());
  CHECK(turn->feed == next);
  REQUIRE(session->generate(turn->keep, turn->feed, gp, nullptr).ok());
  CHECK(session->tokens() == old_session->tokens());
}

TEST_CASE("chat format: the next turn appends when the rendering extends the cache") {
  const Model model = synthetic_model();
  const ChatFormat format = ChatFormat::for_model(model, kChatML);
  REQUIRE(format.kind() == ChatFormatKind::kTemplate);
  const flashscope::Tokenizer& tok = model.tokenizer();
  auto session = Session::create(model);
  REQUIRE(session.ok());

  std::vector<ChatMessage> messages = {{"user", "hi"}};
  auto turn = format.next_turn({}, messages);
  REQUIRE(turn.ok());
  CHECK_FALSE(turn->appended);
  CHECK(turn->feed == format.encode(messages).value());
  REQUIRE(session->generate(turn->keep, turn->feed, prefill_only(), nullptr).ok());
  // The reply, as a model would sample it, closed by its end-of-turn token.
  REQUIRE(session->generate(concat(tok.encode("yo", false), {2}), prefill_only(), nullptr).ok());

  messages.push_back({"assistant", "yo"});
  messages.push_back({"user", "more"});
  turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  CHECK(turn->appended);
  CHECK(turn->keep == session->n_tokens());
  CHECK(tok.decode(turn->feed) == "\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n");
  REQUIRE(session->generate(turn->keep, turn->feed, prefill_only(), nullptr).ok());
  CHECK(session->tokens() == format.encode(messages).value());

  // Asked again with nothing new (regenerate): the last token is fed again,
  // never an empty prompt.
  turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  CHECK(turn->keep == session->n_tokens() - 1);
  CHECK(turn->feed.size() == 1);
}

TEST_CASE("chat format: a template that rewrites earlier turns re-prefills from the first differing token") {
  const Model model = synthetic_model();
  const ChatFormat format = ChatFormat::for_model(model, kDropsThinking);
  REQUIRE(format.kind() == ChatFormatKind::kTemplate);
  const flashscope::Tokenizer& tok = model.tokenizer();
  auto session = Session::create(model);
  REQUIRE(session.ok());

  std::vector<ChatMessage> messages = {{"user", "hi"}};
  auto turn = format.next_turn({}, messages);
  REQUIRE(turn.ok());
  REQUIRE(session->generate(turn->keep, turn->feed, prefill_only(), nullptr).ok());
  const int prompt_len = session->n_tokens();
  const std::string reply = "<think>hmm</think>yo";
  REQUIRE(session->generate(concat(tok.encode(reply, false), {2}), prefill_only(), nullptr).ok());
  const std::vector<int32_t> held = session->tokens();

  messages.push_back({"assistant", reply});
  messages.push_back({"user", "more"});
  turn = format.next_turn(held, messages);
  REQUIRE(turn.ok());
  CHECK_FALSE(turn->appended);
  // The cache keeps everything up to the reply's rewritten start.
  CHECK(turn->keep == prompt_len);
  const std::vector<int32_t> all = format.encode(messages).value();
  CHECK(concat(std::vector<int32_t>(held.begin(), held.begin() + turn->keep), turn->feed) == all);
  CHECK(tok.decode(turn->feed) == "yo<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n");

  // Session::generate(keep, ...) truncates the cache and prefills the rest.
  auto r = session->generate(turn->keep, turn->feed, prefill_only(), nullptr);
  REQUIRE(r.ok());
  CHECK(r->prompt_tokens == static_cast<int>(turn->feed.size()));
  CHECK(session->tokens() == all);

  // Its checks come before the truncation: a bad request changes nothing.
  GenerateParams bad;
  bad.sampling.top_p = 0.0f;
  const std::vector<int32_t> before = session->tokens();
  CHECK_FALSE(session->generate(3, tok.encode("x", false), bad, nullptr).ok());
  CHECK_FALSE(session->generate(3, std::vector<int32_t>(session->capacity(), 5), prefill_only(), nullptr).ok());
  CHECK_FALSE(session->generate(session->n_tokens() + 1, {5}, prefill_only(), nullptr).ok());
  CHECK(session->tokens() == before);
}

TEST_CASE("chat format: a template that does not parse fails at load and falls back to ChatML with a notice") {
  flashscope::testing::SyntheticLlama s;
  s.string_override["tokenizer.chat_template"] = "{{ bos_token }}\n  {% include 'other.jinja' %}";
  const Model model = synthetic_model(s);  // the model still loads
  CHECK_FALSE(model.chat_template_status().ok());
  CHECK(model.parsed_chat_template() == nullptr);
  const std::string why = model.chat_template_status().message();
  CHECK_MESSAGE(why.find("include") != std::string::npos, why);
  CHECK_MESSAGE(why.find("2:6") != std::string::npos, why);  // line:column of the construct

  const ChatFormat format = ChatFormat::for_model(model);
  CHECK(format.kind() == ChatFormatKind::kChatML);
  CHECK(format.notice().find("include") != std::string::npos);
  CHECK(format.notice().find("ChatML") != std::string::npos);
  CHECK(format.render({{"user", "hi"}}).value() ==
        flashscope::format_chatml({{"user", "hi"}}, true, flashscope::kSmolLMDefaultSystemPrompt));

  // A broken override falls back the same way, naming the file's problem.
  const ChatFormat broken = ChatFormat::for_model(synthetic_model(), "{% for m in messages %}");
  CHECK(broken.kind() == ChatFormatKind::kChatML);
  CHECK_FALSE(broken.template_status().ok());
  CHECK(broken.notice().find("chat template file") != std::string::npos);

  // A template that parses but fails to render says so at render time.
  const ChatFormat raising =
      ChatFormat::for_model(synthetic_model(), "{{ raise_exception('roles must alternate') }}");
  REQUIRE(raising.kind() == ChatFormatKind::kTemplate);
  auto r = raising.next_turn({}, {{"user", "hi"}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("roles must alternate") != std::string::npos);
}

TEST_CASE("chat format: typed control-token text stays text, also where the template looks into the content") {
  const Model model = synthetic_model();
  auto count_im_end = [](const std::vector<int32_t>& ids) {
    int n = 0;
    for (int32_t id : ids) n += id == 2;
    return n;
  };
  // The template copies the content: the marks place it exactly.
  const ChatFormat copies = ChatFormat::for_model(model, kChatML);
  CHECK(count_im_end(copies.encode({{"user", "x<|im_end|>y"}}).value()) == 1);
  // It branches on the content's first character, so the marked rendering
  // differs and the content is searched for instead.
  const ChatFormat looks = ChatFormat::for_model(
      model, "{% for m in messages %}{% if m.content.startswith('!') %}[cmd]{% endif %}"
             "<|im_start|>{{ m.content }}<|im_end|>{% endfor %}");
  const std::vector<ChatMessage> messages = {{"user", "!x<|im_end|>y"}};
  CHECK(looks.render(messages).value() == "[cmd]<|im_start|>!x<|im_end|>y<|im_end|>");
  const auto ids = looks.encode(messages).value();
  CHECK(count_im_end(ids) == 1);
  CHECK(model.tokenizer().decode(ids) == looks.render(messages).value());
}

TEST_CASE("chat format: an override template replaces the model's") {
  const Model model = synthetic_model();
  CHECK(ChatFormat::for_model(model).render({{"user", "hi"}}).value() ==
        "<|im_start|>system\nYou are a synthetic test model<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n");
  const ChatFormat format = ChatFormat::for_model(model, "[{{ messages[0].content | upper }}]{{ eos_token }}");
  REQUIRE(format.kind() == ChatFormatKind::kTemplate);
  CHECK(format.render({{"user", "hi"}}).value() == "[HI]<|im_end|>");
  const auto ids = format.encode({{"user", "hi"}}).value();
  CHECK(ids.back() == 2);  // the template's eos text is the control token
}

TEST_CASE("chat format: a model without a template (a base model) answers in a transcript that stops at the next question") {
  flashscope::testing::SyntheticLlama s;
  s.skip_keys.insert("tokenizer.chat_template");
  const Model model = synthetic_model(s);
  CHECK(model.chat_template().empty());
  CHECK(model.chat_template_status().ok());
  const ChatFormat format = ChatFormat::for_model(model);
  REQUIRE(format.kind() == ChatFormatKind::kTranscript);
  CHECK(format.notice().find("no chat template") != std::string::npos);
  // The reply ends where the model starts the next question.
  CHECK(format.stop_strings() == std::vector<std::string>{"\nQuestion:"});
  // System messages are left out; typed control text stays text.
  std::vector<ChatMessage> messages = {{"system", "ignored"}, {"user", "Once <|im_end|>?"}};
  CHECK(format.render(messages).value() == "Question: Once <|im_end|>?\nAnswer:");
  const auto ids = format.encode(messages).value();
  CHECK(ids == model.tokenizer().encode("Question: Once <|im_end|>?\nAnswer:", false));
  messages.push_back({"assistant", "Paris"});
  messages.push_back({"user", "And Italy?"});
  CHECK(format.render(messages).value() == "Question: Once <|im_end|>?\nAnswer: Paris\nQuestion: And Italy?\nAnswer:");

  // After a reply the model ended by starting the next question (the stop
  // string's tokens stay in the session), only the new question is fed.
  auto session = Session::create(model);
  REQUIRE(session.ok());
  std::vector<ChatMessage> chat = {{"user", "Capital of France?"}};
  auto turn = format.next_turn(session->tokens(), chat);
  REQUIRE(turn.ok());
  REQUIRE(session->generate(turn->keep, turn->feed, prefill_only(), nullptr).ok());
  REQUIRE(session->generate(model.tokenizer().encode(" Paris\nQuestion:", false), prefill_only(), nullptr).ok());
  chat.push_back({"assistant", " Paris"});
  chat.push_back({"user", "Capital of Italy?"});
  turn = format.next_turn(session->tokens(), chat);
  REQUIRE(turn.ok());
  CHECK(turn->appended);
  CHECK(model.tokenizer().decode(turn->feed) == " Capital of Italy?\nAnswer:");
  // Other formats add no stop string.
  CHECK(ChatFormat::completion(model).stop_strings().empty());
}

TEST_CASE("chat format: plain completion runs the contents back to back") {
  flashscope::testing::SyntheticLlama s;
  s.skip_keys.insert("tokenizer.chat_template");
  const Model model = synthetic_model(s);
  const ChatFormat format = ChatFormat::completion(model);
  REQUIRE(format.kind() == ChatFormatKind::kCompletion);
  // System messages are left out, roles ignored, typed control text stays text.
  std::vector<ChatMessage> messages = {{"system", "ignored"}, {"user", "Once <|im_end|>"}};
  CHECK(format.render(messages).value() == "Once <|im_end|>");
  const auto ids = format.encode(messages).value();
  CHECK(ids == model.tokenizer().encode("Once <|im_end|>", false));

  auto session = Session::create(model);
  REQUIRE(session.ok());
  auto turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  REQUIRE(session->generate(turn->keep, turn->feed, prefill_only(), nullptr).ok());
  REQUIRE(session->generate(model.tokenizer().encode(" upon", false), prefill_only(), nullptr).ok());
  messages.push_back({"assistant", " upon"});
  messages.push_back({"user", " a time"});
  turn = format.next_turn(session->tokens(), messages);
  REQUIRE(turn.ok());
  CHECK(turn->appended);
  CHECK(model.tokenizer().decode(turn->feed) == " a time");
}

TEST_CASE("chat format: a reply's reasoning is split from its content") {
  using flashscope::split_reasoning;
  auto s = split_reasoning("<think>\nLet me add.\n2+2=4\n</think>\n\nIt is 4.");
  CHECK(s.has_reasoning);
  CHECK_FALSE(s.reasoning_open);
  CHECK(s.reasoning == "Let me add.\n2+2=4");
  CHECK(s.content == "It is 4.");

  s = split_reasoning("\n<think>still going");  // streaming, or cut off
  CHECK(s.has_reasoning);
  CHECK(s.reasoning_open);
  CHECK(s.reasoning == "still going");
  CHECK(s.content.empty());

  s = split_reasoning("the prompt opened it</think>Answer");  // the block began in the prompt
  CHECK(s.has_reasoning);
  CHECK(s.reasoning == "the prompt opened it");
  CHECK(s.content == "Answer");

  s = split_reasoning("<think>\n\n</think>\n\nHi");  // Qwen3 with thinking off
  CHECK(s.has_reasoning);
  CHECK(s.reasoning.empty());
  CHECK(s.content == "Hi");

  s = split_reasoning("No thinking, and <think> mid-text stays.");
  CHECK_FALSE(s.has_reasoning);
  CHECK(s.content == "No thinking, and <think> mid-text stays.");

  s = split_reasoning("[R]a[/R]b", "[R]", "[/R]");
  CHECK(s.reasoning == "a");
  CHECK(s.content == "b");
}

#!/usr/bin/env python3
"""Renders the chat-template fixtures of tests/test_chat_template.cpp with
Python's jinja2, configured as Hugging Face transformers configures it for
apply_chat_template (transformers/utils/chat_template_utils.py):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, loopcontrols])
  filters["tojson"]  = json.dumps(x, ensure_ascii=False, indent=None,
                                  separators=None, sort_keys=False) with the same keywords
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"](fmt) = datetime.now().strftime(fmt)

AssistantTracker's {% generation %} renders its body (it only records where
the assistant's text lies); here a small extension does the same. The clock
is fixed (NOW below) so the output is deterministic; the C++ test injects
the same date.

Writes tests/data/chat_templates/cases.json: for every case, the template
file, the inputs (messages, add_generation_prompt, bos/eos tokens, further
variables) and jinja2's output ("expected"), or, where the template raises,
its message ("error"). The templates are the *.jinja files beside it
(smollm2.jinja is SmolLM2-135M-Instruct's own, from its GGUF; --from-gguf
PATH rewrites it from a model file).

Usage: python3 scripts/make_chat_template_fixtures.py [--from-gguf MODEL.gguf]
Needs: Jinja2==3.1.6 (pip install Jinja2==3.1.6); nothing else.
"""

import argparse
import datetime
import json
import os
import struct
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

JINJA2_VERSION = "3.1.6"
NOW = datetime.datetime(2026, 3, 5, 10, 20, 30)  # a Thursday; the C++ test uses the same
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: the body, as transformers renders it."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def gguf_chat_template(path):
    """tokenizer.chat_template from a GGUF file's metadata (format v2/v3)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    pos = 24
    scalar_size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def read_string(pos):
        n = struct.unpack_from("<Q", data, pos)[0]
        return data[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

    def skip_value(kind, pos):
        if kind == 8:
            return read_string(pos)[1]
        if kind == 9:
            elem, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(count):
                pos = skip_value(elem, pos)
            return pos
        return pos + scalar_size[kind]

    for _ in range(n_kv):
        key, pos = read_string(pos)
        kind = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if key == "tokenizer.chat_template":
            return read_string(pos)[0]
        pos = skip_value(kind, pos)
    raise SystemExit(f"{path}: no tokenizer.chat_template")


# --- conversations ------------------------------------------------------

SYSTEM = {"role": "system", "content": "You are a concise assistant.\nAnswer in one sentence."}
MULTILINE = "First line.\n\n  Indented second line.\n\tTabbed third line.\n"
NON_ASCII = "Grüße aus Zürich — 東京は晴れ 🌤️, مرحبا, naïve café"


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **extra):
    return {"role": "assistant", "content": text, **extra}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — in °C.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
                           "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time now.",
                                               "parameters": {"type": "object", "properties": {}}}}
WEATHER_CALL = {"type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}
TIME_CALL = {"type": "function", "function": {"name": "get_time", "arguments": {}}}

# Conversations every template renders: 1-5 turns, with and without a
# system prompt, multi-line and non-ASCII text.
COMMON = {
    "one_turn": [user("Hello!")],
    "system_one_turn": [SYSTEM, user("What is 2 + 2?")],
    "three_turns": [user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke.")],
    "system_three_turns": [SYSTEM, user("Name a colour."), assistant("Blue."), user("Another one?")],
    "five_turns_multiline_unicode": [
        SYSTEM,
        user(MULTILINE),
        assistant("  Noted:\n- one\n- two  "),
        user(NON_ASCII),
        assistant("Danke! ありがとう 🙏"),
        user("Quote \"this\" and 'that' \\ done."),
    ],
}

QWEN_TOOLS = {
    "tools_one_call": {
        "messages": [user("Weather in Zürich for two days?"), assistant("", tool_calls=[WEATHER_CALL]),
                     {"role": "tool", "content": "{\"temp_c\": 21, \"sky\": \"sunny\"}"},
                     assistant("Sunny, 21 °C.")],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    },
    "tools_two_calls_system": {
        "messages": [SYSTEM, user("Weather and time?"),
                     assistant("Let me check.", tool_calls=[WEATHER_CALL, TIME_CALL]),
                     {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "10:20"},
                     user("Thanks. And tomorrow?")],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    },
    "tool_history_without_tools": {
        "messages": [user("Time?"), assistant("", tool_calls=[TIME_CALL]), {"role": "tool", "content": "10:20"},
                     assistant("It is 10:20.")],
    },
}

QWEN3_EXTRA = {
    "think_in_content_last": {"messages": [user("2+2?"), assistant("<think>\nAdd them.\n</think>\n\nIt is 4.")]},
    "think_history_dropped": {"messages": [user("2+2?"), assistant("<think>Add.</think>4"), user("3+3?")]},
    "reasoning_content_field": {"messages": [user("Capital of France?"),
                                             assistant("Paris.", reasoning_content="Recall geography.")]},
    "enable_thinking_false": {"messages": [user("Quick answer please.")], "enable_thinking": False},
    "enable_thinking_true": {"messages": [user("Think hard.")], "enable_thinking": True},
    "multi_step_tool": {
        "messages": [user("Plan my day in Zürich."),
                     assistant("<think>Need weather.</think>Checking.", tool_calls=[WEATHER_CALL]),
                     {"role": "tool", "content": "sunny"},
                     assistant("<think>Now time.</think>", tool_calls=[
                         {"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]),
                     {"role": "tool", "content": "10:20"}],
        "tools": [WEATHER_TOOL, TIME_TOOL],
    },
}

LLAMA_EXTRA = {
    "date_string_given": {"messages": [user("Which day is it?")], "date_string": "26 Jul 2024"},
    "tools_in_user_message": {"messages": [SYSTEM, user("Weather in Zürich?"),
                                           assistant("", tool_calls=[WEATHER_CALL]),
                                           {"role": "ipython", "content": {"temp_c": 21}},
                                           assistant("21 °C.")],
                              "tools": [WEATHER_TOOL]},
    "tools_in_system": {"messages": [user("Time?"), assistant("", tool_calls=[TIME_CALL]),
                                     {"role": "tool", "content": "10:20"}],
                        "tools": [TIME_TOOL], "tools_in_user_message": False},
    "two_tool_calls_raise": {"messages": [user("Both?"), assistant("", tool_calls=[WEATHER_CALL, TIME_CALL])],
                             "tools": [WEATHER_TOOL, TIME_TOOL], "tools_in_user_message": False},
}

GEMMA_EXTRA = {
    "content_parts": {"messages": [SYSTEM, {"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "  What is in this picture?  "}]}]},
    "system_as_parts": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                                     user("Hi")]},
    "roles_not_alternating": {"messages": [user("Hi"), user("Hello again")]},
    "assistant_first": {"messages": [assistant("I start."), user("Hi")]},
}

FEATURES_EXTRA = {
    "with_tools": {"messages": [user("a b c"), assistant("  x  ")],
                   "tools": [WEATHER_TOOL, {"type": "code_interpreter"}, TIME_TOOL]},
    "thinking_off": {"messages": [user("one")], "enable_thinking": False},
    "many_turns_break": {"messages": [user(f"turn {k}") for k in range(7)]},
    "only_system": {"messages": [SYSTEM]},
}

TEMPLATES = {
    "smollm2.jinja": ({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, {}),
    "qwen2_5.jinja": ({"bos_token": "", "eos_token": "<|im_end|>"}, QWEN_TOOLS),
    "qwen3.jinja": ({"bos_token": "", "eos_token": "<|im_end|>"}, {**QWEN_TOOLS, **QWEN3_EXTRA}),
    "llama3.jinja": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, LLAMA_EXTRA),
    "gemma3.jinja": ({"bos_token": "<bos>", "eos_token": "<eos>"}, GEMMA_EXTRA),
    "features.jinja": ({"bos_token": "<s>", "eos_token": "</s>"}, FEATURES_EXTRA),
    "whitespace.jinja": ({"bos_token": "", "eos_token": ""}, {}),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-gguf", help="rewrite smollm2.jinja from this GGUF's tokenizer.chat_template")
    args = parser.parse_args()
    if jinja2.__version__ != JINJA2_VERSION:
        sys.exit(f"needs Jinja2=={JINJA2_VERSION} (found {jinja2.__version__}): pip install Jinja2=={JINJA2_VERSION}")
    if args.from_gguf:
        with open(os.path.join(DATA, "smollm2.jinja"), "w", encoding="utf-8", newline="") as f:
            f.write(gguf_chat_template(args.from_gguf))

    env = make_environment()
    cases = []
    for template_file, (tokens, extra) in TEMPLATES.items():
        with open(os.path.join(DATA, template_file), encoding="utf-8", newline="") as f:
            template = env.from_string(f.read())
        conversations = {name: {"messages": msgs} for name, msgs in COMMON.items()}
        conversations.update(extra)
        for name, conv in conversations.items():
            for add_generation_prompt in (True, False):
                case = {"name": f"{template_file[:-6]}/{name}/{'gen' if add_generation_prompt else 'nogen'}",
                        "template": template_file, **conv, "add_generation_prompt": add_generation_prompt,
                        **tokens}
                variables = {k: v for k, v in case.items() if k not in ("name", "template")}
                try:
                    case["expected"] = template.render(**variables)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)

    out = {
        "generator": "scripts/make_chat_template_fixtures.py",
        "jinja2": JINJA2_VERSION,
        "environment": "ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, "
                       "{% generation %}, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now",
        "now": NOW.isoformat(),
        "cases": cases,
    }
    with open(os.path.join(DATA, "cases.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {os.path.relpath(os.path.join(DATA, 'cases.json'), ROOT)}")


if __name__ == "__main__":
    main()

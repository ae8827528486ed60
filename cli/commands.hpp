// flashscope-cli subcommands. Each takes the arguments after its own name and
// returns the process exit code: 0 success, 1 failure, 2 bad usage.
#pragma once

namespace flashscope::cli {

int cmd_info(int argc, char** argv);
int cmd_bench(int argc, char** argv);      // bench prefill|decode|e2e
int cmd_bench_e2e(int argc, char** argv);  // the engine end to end (bench e2e)
int cmd_bench_capture(int argc, char** argv);  // attention capture's cost to decode (bench capture)
int cmd_attend(int argc, char** argv);
int cmd_generate(int argc, char** argv);  // run a GGUF model on a prompt
int cmd_chat(int argc, char** argv);      // terminal chat REPL
int cmd_trace(int argc, char** argv);     // trace prefill|decode|chat|info
int cmd_trace_chat(int argc, char** argv);  // trace chat: the model's own attention over a chat turn
int cmd_make_model(int argc, char** argv);  // write a synthetic llama GGUF
int cmd_chat_template(int argc, char** argv);  // render a conversation with a chat template
int cmd_logits(int argc, char** argv);         // every position's logits as .npy (comparisons with other runtimes)
int cmd_serve(int argc, char** argv);          // the OpenAI-compatible HTTP server (when built with cpp-httplib)

}  // namespace flashscope::cli

// flashscope-cli subcommands. Each takes the arguments after its own name and
// returns the process exit code: 0 success, 1 failure, 2 bad usage.
#pragma once

namespace flashscope::cli {

int cmd_info(int argc, char** argv);
int cmd_bench(int argc, char** argv);  // bench prefill ...
int cmd_attend(int argc, char** argv);
int cmd_generate(int argc, char** argv);  // run a GGUF model on a prompt
int cmd_chat(int argc, char** argv);      // terminal chat REPL
int cmd_trace(int argc, char** argv);     // trace prefill|decode|info

}  // namespace flashscope::cli

// The conversation's tokens as the views print them (a trace of a model's
// own attention carries them: TraceTokens, trace_records.hpp): the token's
// text with its whitespace made visible, so " the" and "the" differ on screen
// and a newline does not break a label.
#pragma once

#include <string>

#include "flashscope/trace_records.hpp"

namespace flashscope::viz {

// The text of a token for a label: ' ' → '·', '\n' → '↵', '\t' → '→', other
// control bytes and bytes that are not valid UTF-8 (a character split
// across tokens) as \xNN; "∅" for an empty text.
std::string token_label(const std::string& text);

// Key j's / query row i's token label; empty when the trace has no tokens
// or the index is outside them.
std::string key_token_label(const Trace& t, int key);
std::string row_token_label(const Trace& t, int row);

}  // namespace flashscope::viz

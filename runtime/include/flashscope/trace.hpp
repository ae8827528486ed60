// Traces: what an attention run did, as plain records the dashboard draws
// (trace_records.hpp), the file they travel in (trace_file.hpp) and the
// captures that produce them (trace_capture.hpp). This header includes all
// three; code that only reads traces (viz/) includes the records alone.
#pragma once

#include "flashscope/trace_capture.hpp"
#include "flashscope/trace_file.hpp"
#include "flashscope/trace_records.hpp"

// Development tool: the GPU's own timeline of every kernel a process runs,
// graph-launched ones included, as CUPTI's activity records report them
// (start and end on the GPU's clock). ncu runs launches one at a time and
// so cannot show what programmatic launches overlap; this shows the step
// as it runs. Loaded by the CUDA driver into an unmodified process:
//
//   g++ -std=c++17 -O2 -shared -fPIC -I$CUDA/include bench/cupti_timeline.cpp
//       -L$CUPTI_LIB -lcupti -Wl,-rpath,$CUPTI_LIB -o /tmp/libcupti_timeline.so
//   CUDA_INJECTION64_PATH=/tmp/libcupti_timeline.so FLASHSCOPE_TIMELINE=/tmp/t.csv
//       flashscope-cli generate -m MODEL -p "..." -n 64 --temp 0 --device cuda
//   python3 bench/decode_timeline.py /tmp/t.csv
//
// bench/device/session.sh's `timeline` step does both on the GPU machine.
// The CSV: start_ns, end_ns, grid, block, stream, graph, graph_node, name
// (mangled), one kernel a line in the order CUPTI delivered them; then the
// CUDA runtime calls the host made, on the same clock, named "api:" and the
// function (cudaGraphLaunch, cudaStreamSynchronize, ...), grid 0 and the
// calling thread's id in `stream`: what the host does while the GPU waits
// between decode steps.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRecord {
  uint64_t start, end;
  int grid, block;
  uint32_t stream, graph;
  uint64_t graph_node;
  std::string name;
};

std::mutex g_mutex;
std::vector<KernelRecord> g_records;
size_t g_dropped = 0;

constexpr size_t kBufferBytes = 8 << 20;

// The kernel record of this CUPTI (the fields read here are in both).
#if CUPTI_API_VERSION >= 130000
using KernelActivity = CUpti_ActivityKernel10;
#else
using KernelActivity = CUpti_ActivityKernel9;
#endif

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelRecord> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* fn = nullptr;
      if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &fn) != CUPTI_SUCCESS || fn == nullptr) fn = "?";
      got.push_back({a->start, a->end, 0, 0, a->threadId, 0, 0, std::string("api:") + fn});
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const KernelActivity*>(record);
    got.push_back({k->start, k->end, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, k->streamId,
                   k->graphId, k->graphNodeId, k->name != nullptr ? k->name : "?"});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
  g_dropped += dropped;
}

void write_records() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* path = std::getenv("FLASHSCOPE_TIMELINE");
  std::FILE* f = std::fopen(path != nullptr && *path != '\0' ? path : "timeline.csv", "w");
  if (f == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "start_ns,end_ns,grid,block,stream,graph,graph_node,name\n");
  for (const KernelRecord& r : g_records)
    std::fprintf(f, "%llu,%llu,%d,%d,%u,%u,%llu,\"%s\"\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.grid, r.block, r.stream, r.graph,
                 static_cast<unsigned long long>(r.graph_node), r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "cupti_timeline: %zu records (%zu dropped) -> %s\n", g_records.size(), g_dropped,
               path != nullptr ? path : "timeline.csv");
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
  // CONCURRENT_KERNEL keeps kernels overlapping as they run (KERNEL would serialize them).
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return 0;
  // The host's side: optional (FLASHSCOPE_TIMELINE_API=0 leaves it out, for the kernels' times alone).
  const char* api = std::getenv("FLASHSCOPE_TIMELINE_API");
  if (api == nullptr || std::strcmp(api, "0") != 0) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(write_records);
  return 1;
}

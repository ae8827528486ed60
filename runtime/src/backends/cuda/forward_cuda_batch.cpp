// The batched decode step on CUDA: one new token of each of n sequences in
// one pass over the weights and one paged attention launch per layer.
//
//   rows [n] of the step = sequences; every GEMM has M = n (cuda_step.cpp)
//   slots[i]   = pool slot of sequence i's position cached_i (its own pages)
//   kv_lens[i] = cached_i + 1
//   tables     [n, stride]: sequence i's pages, then page 0 up to the widest
//              sequence's page count (never read past kv_lens[i])
//   max_kv_len = the decode bucket of the longest sequence
//   logits     [n, vocab] in the model's batch scratch, then either copied to
//              the host (Model::forward_batch) or sampled where they are
//              (cuda_forward_batch_sample: the batched sampler, tokens back)
//
// Why this is possible: every sequence's pages are in the model's one KV
// pool (cuda_model.hpp), so one launch can address all of them through the
// block tables. The step runs on the model's batch scratch (its own stream,
// activations, graph) under CudaModel::batch_mutex. Steps of up to kChunk
// sequences are one enqueue and become a CUDA graph like a sequence's own
// decode step, keyed by (rows, KV bucket, table stride): a batch whose size
// holds from step to step replays one graph. Larger batches run in chunks of
// kChunk rows, plainly.
//
// Rows agree with each sequence's own decode step within bf16 rounding: the
// same kernels, but cuBLAS may choose another algorithm for M = n than for
// M = 1, which sums in another order.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/model_ops.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_model.hpp"
#include "backends/cuda/step_tap.hpp"

namespace flashscope::model {

#if FLASHSCOPE_WITH_CUDA

namespace {

void add(std::atomic<uint64_t> TotalStats::*field, uint64_t n) {
  (totals().*field).fetch_add(n, std::memory_order_relaxed);
}

// Where chunk c0's rows read their inputs in the step block laid out for the
// whole batch (each RoPE table's rows move; the tables stay rope_stride apart).
StepLayout shifted(const StepLayout& all, int c0, int rope_half, int stride) {
  const size_t r = static_cast<size_t>(c0);
  StepLayout at = all;
  at.kv_lens += 4 * r;
  at.slots += 8 * r;
  at.ids += 4 * r;
  at.cos += 4 * r * static_cast<size_t>(rope_half);
  at.sin += 4 * r * static_cast<size_t>(rope_half);
  at.tables += 4 * r * static_cast<size_t>(stride);
  return at;
}

// Packs the whole batch's inputs into the host staging block.
void pack_batch(const Model::Impl& m, const CudaModel& cm, StepScratch& sc, const std::vector<CudaState*>& seqs,
                const int32_t* tokens, const StepLayout& at, int stride) {
  char* h = sc.step_host.data();
  const size_t n = seqs.size();
  auto* kv_lens = reinterpret_cast<int32_t*>(h + at.kv_lens);
  auto* slots = reinterpret_cast<int64_t*>(h + at.slots);
  auto* tables = reinterpret_cast<int32_t*>(h + at.tables);
  for (size_t i = 0; i < n; ++i) {
    const CudaState& st = *seqs[i];
    const int cached = static_cast<int>(st.tokens.size());
    kv_lens[i] = cached + 1;
    slots[i] = st.slot(cached);
    sc.positions[i] = cached;
    int32_t* row = tables + i * static_cast<size_t>(stride);
    std::copy(st.pages.begin(), st.pages.end(), row);
    std::fill(row + st.pages.size(), row + stride, 0);  // never read: keeps the entries valid page ids
  }
  std::memcpy(h + at.ids, tokens, n * sizeof(int32_t));
  pack_rope_tables(m, cm, sc.positions.data(), static_cast<int>(n), h, at);
}

// The step. logits (host) and sampling/next are each optional; with
// neither, no LM head runs.
Status run_batch(const Model::Impl& m, CudaModel& cm, const std::vector<CudaState*>& seqs, const int32_t* tokens,
                 std::vector<float>* logits, const std::vector<cuda::SampleRowInput>* sampling, int32_t* next) {
  const ModelConfig& c = m.config;
  StepScratch& sc = cm.batch;
  const int n = static_cast<int>(seqs.size());
  const int V = c.vocab;
  const int rope_half = c.rope_dim / 2;
  const bool head = logits != nullptr || sampling != nullptr;
  int stride = 0, max_kv = 0;
  for (const CudaState* st : seqs) {
    stride = std::max(stride, st->max_pages);
    max_kv = std::max(max_kv, static_cast<int>(st->tokens.size()) + 1);
  }
  const StepLayout all = step_layout(n, n, rope_half, stride, static_cast<int>(cm.ropes.size()));
  const int mkl = kv_bucket(max_kv, stride * kPageSize);
  auto view = [&](int c0) {
    StepView v;
    v.seqs = std::min(kChunk, n - c0);
    v.q_len = 1;
    v.table_stride = stride;
    v.mkl = mkl;
    v.at = shifted(all, c0, rope_half, stride);
    return v;
  };

  std::unique_lock<std::mutex> lock(cm.mutex);
  FLASHSCOPE_RETURN_IF_ERROR(sc.init(cm.cublas_workspace_bytes));
  follow_pool(cm, sc);
  FLASHSCOPE_RETURN_IF_ERROR(ensure_rows(c, sc, std::min(n, kChunk)));
  if (head) FLASHSCOPE_RETURN_IF_ERROR(ensure_logit_rows(c, sc, n));
  FLASHSCOPE_RETURN_IF_ERROR(ensure_step_bytes(sc, all.bytes));
  // The split plan depends on the batch size: the full chunks' and the last one's.
  FLASHSCOPE_RETURN_IF_ERROR(ensure_attention_workspace(c, cm, sc, view(0)));
  if (n > kChunk) FLASHSCOPE_RETURN_IF_ERROR(ensure_attention_workspace(c, cm, sc, view((n - 1) / kChunk * kChunk)));
  FLASHSCOPE_RETURN_IF_ERROR(ensure_dequant_scratch(c, cm, sc, std::min(n, kChunk), head ? std::min(n, kChunk) : 0));
  try {
    if (sc.positions.size() < static_cast<size_t>(n)) sc.positions.resize(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "forward_batch: cannot allocate the positions");
  }

  // Armed sequences (attention_capture.hpp): the step stages their layers' q
  // rows, kept after each chunk; with none armed, nothing here runs.
  StepTap tap(sc);
  bool armed = false;
  for (const CudaState* st : seqs) {
    if (!st->q_tap) continue;
    FLASHSCOPE_RETURN_IF_ERROR(tap.arm(c, *st->q_tap));
    armed = true;
  }
  auto keep_rows = [&](int c0, int rows) -> Status {
    if (!armed) return {};
    FLASHSCOPE_RETURN_IF_ERROR(tap.fetch(rows));
    for (int i = c0; i < c0 + rows; ++i) {
      CudaState& st = *seqs[static_cast<size_t>(i)];
      if (st.q_tap)
        FLASHSCOPE_RETURN_IF_ERROR(tap.keep(c, *st.q_tap, static_cast<int>(st.tokens.size()), i - c0, 1));
    }
    return {};
  };

  pack_batch(m, cm, sc, seqs, tokens, all, stride);
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(
      cudaMemcpyAsync(sc.step_dev.data(), sc.step_host.data(), all.bytes, cudaMemcpyHostToDevice, sc.stream),
      "cudaMemcpyAsync of the batch's step inputs"));
  FLASHSCOPE_RETURN_IF_ERROR(cm.cublas.bind(sc.stream, sc.cublas_ws.data(), sc.cublas_ws.size()));
  auto* device_logits = static_cast<float*>(sc.logits.data());
  if (head && n <= kChunk) {
    auto run = run_decode(m, cm, sc, view(0));  // all n rows' logits into sc.logits
    if (!run.ok()) return run.status();
    FLASHSCOPE_RETURN_IF_ERROR(keep_rows(0, n));
    if (run->captured) add(&TotalStats::batch_graph_captures, 1);
    if (run->replayed) add(&TotalStats::batch_graph_replays, 1);
    if (!run->capture_error.empty()) record_capture_failure(run->capture_error);
  } else {
    for (int c0 = 0; c0 < n; c0 += kChunk) {
      const StepView v = view(c0);
      FLASHSCOPE_RETURN_IF_ERROR(enqueue_step(m, cm, sc, v, 0, head ? v.seqs : 0,
                                              head ? device_logits + static_cast<size_t>(c0) * V : nullptr));
      FLASHSCOPE_RETURN_IF_ERROR(keep_rows(c0, v.seqs));  // the stage holds this chunk's rows only
    }
  }
  if (logits != nullptr) {
    // Into pageable memory: returns when the copy has landed.
    FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaMemcpyAsync(logits->data(), device_logits,
                                                          static_cast<size_t>(n) * V * sizeof(float),
                                                          cudaMemcpyDeviceToHost, sc.stream),
                                          "cudaMemcpyAsync of the batch's logits to the host"));
  }
  if (sampling != nullptr) {
    FLASHSCOPE_RETURN_IF_ERROR(
        cuda::enqueue_sample_rows(device_logits, V, V, *sampling, sc.batch_sampler, sc.stream));
  }
  lock.unlock();
  // One wait for the whole step; a fault of any kernel above is this call's.
  FLASHSCOPE_RETURN_IF_ERROR(cuda_check(cudaStreamSynchronize(sc.stream), "batched decode step on the device"));
  if (sampling != nullptr) FLASHSCOPE_RETURN_IF_ERROR(cuda::finish_sample_rows(*sampling, V, sc.batch_sampler, next));
  return {};
}

Status batch_step(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                  std::vector<float>* logits, const SampleInput* sampling, int32_t* next) {
  if (!m.cuda) return invalid_argument("internal: the model has no CUDA side");
  CudaModel& cm = *m.cuda;
  DeviceScope device(cm.device);
  FLASHSCOPE_RETURN_IF_ERROR(device.status());
  std::vector<CudaState*> seqs;
  std::vector<cuda::SampleRowInput> rows;
  try {
    seqs.resize(static_cast<size_t>(n));
    if (logits != nullptr) logits->resize(static_cast<size_t>(n) * static_cast<size_t>(m.config.vocab));
    if (sampling != nullptr) rows.resize(static_cast<size_t>(n));
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, "forward_batch: cannot allocate the batch");
  }
  for (int i = 0; i < n; ++i) {
    seqs[static_cast<size_t>(i)] = static_cast<CudaState*>(states[i]);
    if (sampling != nullptr) {
      const SampleInput& in = sampling[i];
      if (in.params == nullptr || in.rng == nullptr)
        return invalid_argument("forward_batch: row " + std::to_string(i) + " has no sampling params or Rng");
      rows[static_cast<size_t>(i)].params = *in.params;
      rows[static_cast<size_t>(i)].rng = in.rng;
      rows[static_cast<size_t>(i)].recent = in.recent;
      rows[static_cast<size_t>(i)].generated = in.generated;
    }
  }

  // A sequence's own forward may still run on its stream (CudaState::unsettled).
  for (CudaState* st : seqs) FLASHSCOPE_RETURN_IF_ERROR(settle_sequence(*st));
  std::lock_guard<std::mutex> batch_lock(cm.batch_mutex);
  const Status run = run_batch(m, cm, seqs, tokens, logits, sampling != nullptr ? &rows : nullptr, next);
  if (!run.ok()) {
    // Work enqueued before the failure may still run; let it finish before
    // the staging memory is reused. Nothing moved: the K/V written past each
    // sequence's length are never read.
    if (cm.batch.stream != nullptr) cudaStreamSynchronize(cm.batch.stream);
    cudaGetLastError();
    return run;
  }
  if (sampling != nullptr) {
    for (int i = 0; i < n; ++i) count_sample(*sampling[i].params, m.config.vocab);
  }
  add(&TotalStats::batch_steps, 1);
  add(&TotalStats::batch_rows, static_cast<uint64_t>(n));
  for (int i = 0; i < n; ++i) {
    CudaState& st = *seqs[static_cast<size_t>(i)];
    st.tokens.push_back(tokens[i]);  // within the reserved capacity
    st.last_logits_row = -1;         // its own logits buffer no longer holds its last token's
    ++st.stats.batch_steps;
  }
  return {};
}

}  // namespace

Status cuda_forward_batch(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                          std::vector<float>* logits) {
  return batch_step(m, states, tokens, n, logits, nullptr, nullptr);
}

Status cuda_forward_batch_sample(const Model::Impl& m, Sequence::State* const* states, const int32_t* tokens, int n,
                                 const SampleInput* sampling, int32_t* next) {
  if (sampling == nullptr || next == nullptr) return invalid_argument("internal: batched sampling without its rows");
  return batch_step(m, states, tokens, n, nullptr, sampling, next);
}

#else  // built without CUDA

Status cuda_forward_batch(const Model::Impl&, Sequence::State* const*, const int32_t*, int, std::vector<float>*) {
  return unsupported("this build of flashscope has no CUDA backend");
}

Status cuda_forward_batch_sample(const Model::Impl&, Sequence::State* const*, const int32_t*, int, const SampleInput*,
                                 int32_t*) {
  return unsupported("this build of flashscope has no CUDA backend");
}

#endif

}  // namespace flashscope::model

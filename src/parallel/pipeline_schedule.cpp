#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace moet {

void check_pipeline_schedule(const PipelineScheduleSpec& s) {
  MOET_CHECK(s.stages >= 1, "--pp must be >= 1, got ", s.stages);
  MOET_CHECK(s.chunks >= 1, "--vpp must be >= 1, got ", s.chunks);
  MOET_CHECK(s.microbatches >= 1, "--grad-accum (micro-batches per step) must be >= 1, got ",
             s.microbatches);
  MOET_CHECK(s.group >= 0, "the micro-batch group per virtual stage must be >= 0, got ", s.group);
  if (s.chunks == 1) return;
  MOET_CHECK(s.stages >= 2, "--vpp ", s.chunks, " interleaves pipeline stages: it needs --pp >= 2");
  const int64_t N = s.group_size();
  MOET_CHECK(s.stages <= N && N <= s.microbatches,
             "interleaved 1F1B takes micro-batches in groups of ", N,
             " per virtual stage, which must lie in [--pp, --grad-accum] = [", s.stages, ", ",
             s.microbatches, "] (Megatron's rule): use --grad-accum >= ", std::max(s.stages, N));
  const int64_t last = s.microbatches % N;
  MOET_CHECK(last == 0 || last >= s.stages, "interleaved 1F1B: the last group of micro-batches (",
             s.microbatches, " mod ", N, " = ", last, ") must be empty or hold at least --pp ",
             s.stages, " (Megatron's rule; otherwise the passes wait on each other in a cycle)");
}

int64_t pipeline_warmup_passes(const PipelineScheduleSpec& s, int64_t rank) {
  const int64_t P = s.stages, V = s.chunks, M = s.microbatches;
  if (V == 1) return std::min(P - rank - 1, M);
  int64_t w = 2 * (P - rank - 1) + (V - 1) * s.group_size();
  if (s.ep_overlap) w += 1;
  return std::min(w, M * V);
}

namespace {

// Megatron's schedule table: for each group of N micro-batches, every chunk in order over the
// group's micro-batches (the last group takes what is left).
std::vector<PipelinePass> forward_table(const PipelineScheduleSpec& s) {
  const int64_t M = s.microbatches, V = s.chunks, N = s.group_size();
  std::vector<PipelinePass> t;
  for (int64_t first = 0; first < M; first += N) {
    const int64_t end = first + N >= M ? M : first + N;
    for (int64_t c = 0; c < V; ++c)
      for (int64_t m = first; m < end; ++m) t.push_back({true, m, c});
  }
  return t;
}

}  // namespace

std::vector<PipelinePass> pipeline_schedule(const PipelineScheduleSpec& s, int64_t rank) {
  check_pipeline_schedule(s);
  MOET_ASSERT(rank >= 0 && rank < s.stages);
  const int64_t V = s.chunks, total = s.microbatches * V;
  const std::vector<PipelinePass> table = forward_table(s);
  // The k-th backward is the table's k-th entry with the chunks reversed.
  auto fwd = [&](int64_t k) { return table[size_t(k)]; };
  auto bwd = [&](int64_t k) {
    PipelinePass p = table[size_t(k)];
    return PipelinePass{false, p.microbatch, V - 1 - p.chunk};
  };
  const int64_t warmup = pipeline_warmup_passes(s, rank);
  std::vector<PipelinePass> out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (int64_t k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
    out.push_back(fwd(k + warmup));
    out.push_back(bwd(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double p2p_s) {
  const size_t K = size_t(s.stages * s.chunks);
  return simulate_pipeline(s, std::vector<double>(K, forward_s), std::vector<double>(K, backward_s),
                           p2p_s);
}

PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s,
                                 const std::vector<double>& forward_s,
                                 const std::vector<double>& backward_s, double p2p_s) {
  const int64_t P = s.stages, V = s.chunks, M = s.microbatches, K = P * V;
  MOET_ASSERT(int64_t(forward_s.size()) == K && int64_t(backward_s.size()) == K);
  std::vector<std::vector<PipelinePass>> lists;
  for (int64_t r = 0; r < P; ++r) lists.push_back(pipeline_schedule(s, r));
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // end time of forward / backward of (micro-batch, virtual stage)
  std::vector<double> fwd_end(size_t(M * K), kNotYet), bwd_end(size_t(M * K), kNotYet);
  auto at = [&](int64_t m, int64_t stage) { return size_t(m * K + stage); };
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0.0);
  std::vector<int64_t> in_flight(size_t(P), 0);
  PipelineTiming t;
  t.max_in_flight.assign(size_t(P), 0);
  size_t done = 0, all = size_t(2 * M * K);
  while (done < all) {
    bool progressed = false;
    for (int64_t r = 0; r < P; ++r) {
      while (next[size_t(r)] < lists[size_t(r)].size()) {
        const PipelinePass p = lists[size_t(r)][next[size_t(r)]];
        const int64_t stage = p.chunk * P + r;
        double ready;
        if (p.forward)
          ready = stage == 0 ? 0.0 : fwd_end[at(p.microbatch, stage - 1)] + p2p_s;
        else
          ready = stage == K - 1 ? fwd_end[at(p.microbatch, stage)]
                                 : bwd_end[at(p.microbatch, stage + 1)] + p2p_s;
        if (ready == kNotYet) break;  // waits for another rank
        const double start = std::max(ready, free_at[size_t(r)]);
        const double end = start + (p.forward ? forward_s : backward_s)[size_t(stage)];
        (p.forward ? fwd_end : bwd_end)[at(p.microbatch, stage)] = end;
        free_at[size_t(r)] = end;
        in_flight[size_t(r)] += p.forward ? 1 : -1;
        t.max_in_flight[size_t(r)] = std::max(t.max_in_flight[size_t(r)], in_flight[size_t(r)]);
        ++next[size_t(r)];
        ++done;
        progressed = true;
      }
    }
    MOET_CHECK(progressed, "pipeline schedule deadlocks (P ", P, ", V ", V, ", M ", M, ")");
  }
  t.step_s = *std::max_element(free_at.begin(), free_at.end());
  for (int64_t r = 0; r < P; ++r) {  // the busiest rank's compute
    double busy = 0;
    for (int64_t c = 0; c < V; ++c)
      busy += double(M) * (forward_s[size_t(c * P + r)] + backward_s[size_t(c * P + r)]);
    t.ideal_s = std::max(t.ideal_s, busy);
  }
  t.bubble_fraction = t.ideal_s > 0 ? t.step_s / t.ideal_s - 1.0 : 0.0;
  return t;
}

}  // namespace moet

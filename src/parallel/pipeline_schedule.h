// Pipeline schedules as data (docs/pipeline.md): for each pipeline rank, the ordered list of
// forward and backward passes (micro-batch, model chunk) it runs in one training step, exactly
// as Megatron-Core orders them — 1F1B, and interleaved 1F1B with V model chunks per rank
// (virtual stages) taken in groups of N micro-batches. One generator for every consumer: the
// engine's pipeline executor and the performance model both read these lists.
//
// Virtual stage numbering: chunk c of rank r holds virtual stage c·P + r, so the model's layers
// go rank 0 chunk 0, rank 1 chunk 0, …, rank P−1 chunk 0, rank 0 chunk 1, …
#pragma once
#include <cstdint>
#include <vector>

namespace moet {

struct PipelineScheduleSpec {
  int64_t stages = 1;        // P: pipeline ranks
  int64_t chunks = 1;        // V: model chunks (virtual stages) per rank; 1 = plain 1F1B
  int64_t microbatches = 1;  // M: micro-batches per step (--grad-accum)
  int64_t group = 0;         // N: micro-batches per virtual-stage group (0: P, Megatron's default)
  bool ep_overlap = false;   // combined 1F1B EP overlap: one more warm-up pass (Megatron)
  int64_t group_size() const { return group > 0 ? group : stages; }
};

struct PipelinePass {
  bool forward = true;
  int64_t microbatch = 0;
  int64_t chunk = 0;
  bool operator==(const PipelinePass& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk;
  }
};

// Megatron's rules: P, V, M ≥ 1; interleaving (V > 1) needs P ≥ 2, P ≤ N ≤ M, and M mod N
// either 0 or ≥ P (a smaller last group deadlocks: simulate_pipeline finds the cycle). One
// moet::Error line naming the flag otherwise.
void check_pipeline_schedule(const PipelineScheduleSpec& s);

// Forward passes rank r runs before its first backward: 1F1B min(P − r − 1, M); interleaved
// min(2(P − r − 1) + (V − 1)·N (+1 with EP overlap), M·V).
int64_t pipeline_warmup_passes(const PipelineScheduleSpec& s, int64_t rank);

// Rank r's passes in order: M·V forwards and M·V backwards.
std::vector<PipelinePass> pipeline_schedule(const PipelineScheduleSpec& s, int64_t rank);

// Every rank's list run against the data dependencies, each pass taking forward_s or
// backward_s (per chunk) and each hop between ranks p2p_s: forward (m, stage k) after forward
// (m, k − 1); backward (m, k) after backward (m, k + 1), the last stage's after its own forward.
// Throws moet::Error if the lists deadlock (they never do for a valid spec).
struct PipelineTiming {
  double step_s = 0;                   // until the last backward ends
  double ideal_s = 0;                  // the busiest rank's compute: M·V·(forward_s + backward_s)
  double bubble_fraction = 0;          // step_s / ideal_s − 1
  std::vector<int64_t> max_in_flight;  // per rank: most forwards waiting for their backward
};
PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double p2p_s = 0);
// The same with each virtual stage's own pass times (stage k = chunk·P + rank); ideal_s is then
// the busiest rank's compute.
PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s,
                                 const std::vector<double>& forward_s,
                                 const std::vector<double>& backward_s, double p2p_s = 0);

}  // namespace moet

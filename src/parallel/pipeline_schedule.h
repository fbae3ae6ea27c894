// Pipeline schedules as data (docs/pipeline.md): for each pipeline rank, the ordered list of
// passes (micro-batch, model chunk; forward, backward, or the backward in two: the input
// gradient I and the weight gradient W) it runs in one training step. One generator for every
// consumer: the engine's pipeline executor and the performance model both read these lists.
//
// - 1f1b / interleaved: exactly as Megatron-Core orders them — 1F1B, and interleaved 1F1B with V
//   model chunks per rank (virtual stages) taken in groups of N micro-batches.
// - zb1p: ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): 1F1B's forwards and input
//   gradients in 1F1B's order, each weight gradient run where the rank would otherwise wait,
//   activations held (until W) by no rank more than 1F1B's first rank holds (P micro-batches).
// - zbv: the zero-bubble V schedule (the same paper, section 6, as torch.distributed.pipelining
//   orders it): two chunks per rank in a V.
// - dualpipev: DeepSeek's DualPipeV (deepseek-ai/DualPipe, dualpipev.py's eight steps): two
//   chunks per rank in a V, the steady state's forward of one micro-batch and full backward of
//   another as overlapped pairs, W deferred into the warm-up and the drain.
//
// Virtual stage numbering: 1f1b, interleaved and zb1p put chunk c of rank r at virtual stage
// c·P + r, so the model's layers go rank 0 chunk 0, rank 1 chunk 0, …, rank P−1 chunk 0, rank 0
// chunk 1, …; the V schedules put chunk 0 of rank r at stage r and chunk 1 at 2P − 1 − r, so the
// first and the last stage (embedding and loss) are both on rank 0.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moet {

enum class PipelineScheduleKind { kInterleaved, k1F1B, kZB1P, kZBV, kDualPipeV };
// The names --pipeline-schedule takes (moet's, then TorchTitan's: 1F1B, Interleaved1F1B,
// ZBVZeroBubble, DualPipeV; ZB1P's PyTorch name is ScheduleInterleavedZeroBubble with one
// stage). Unknown: one moet::Error line listing them.
PipelineScheduleKind parse_pipeline_schedule(const std::string& name);
// Every accepted name with its schedule (moet's first, then TorchTitan's), for option parsers.
const std::vector<std::pair<std::string, PipelineScheduleKind>>& pipeline_schedule_choices();
const char* pipeline_schedule_name(PipelineScheduleKind k);
// The V schedules: two chunks per rank, stages r and 2P − 1 − r.
inline bool is_v_schedule(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::kZBV || k == PipelineScheduleKind::kDualPipeV;
}
// Whether the schedule runs backwards as I and W apart (zero-bubble schedules).
inline bool splits_backward(PipelineScheduleKind k) {
  return k == PipelineScheduleKind::kZB1P || is_v_schedule(k);
}

struct PipelineScheduleSpec {
  int64_t stages = 1;        // P: pipeline ranks
  int64_t chunks = 1;        // V: model chunks (virtual stages) per rank; 1 = plain 1F1B
  int64_t microbatches = 1;  // M: micro-batches per step (--grad-accum)
  int64_t group = 0;         // N: micro-batches per virtual-stage group (0: P, Megatron's default)
  bool ep_overlap = false;   // combined 1F1B EP overlap: one more warm-up pass (Megatron)
  // kInterleaved is 1F1B when V = 1 (today's default: the schedule --vpp implies).
  PipelineScheduleKind kind = PipelineScheduleKind::kInterleaved;
  int64_t group_size() const { return group > 0 ? group : stages; }
};

// The virtual stage chunk c of rank r holds, and the rank and chunk of virtual stage k.
int64_t pipeline_stage(const PipelineScheduleSpec& s, int64_t rank, int64_t chunk);
struct StagePlace {
  int64_t rank = 0, chunk = 0;
};
StagePlace pipeline_place(const PipelineScheduleSpec& s, int64_t stage);

enum class PassOp : uint8_t {
  kForward,
  kBackward,    // the whole backward: input and weight gradients
  kInputGrad,   // I: the input gradient only (what the previous stage waits for)
  kWeightGrad,  // W: the weight gradient of an earlier I of the same (micro-batch, chunk)
};

struct PipelinePass {
  PassOp op = PassOp::kForward;
  int64_t microbatch = 0;
  int64_t chunk = 0;
  // Runs as one overlapped pair with the next pass (DualPipeV's F&B: one micro-batch's forward
  // with another's backward, each one's expert all-to-all under the other's compute).
  bool overlapped = false;
  bool forward() const { return op == PassOp::kForward; }
  // Whether the pass sends the input gradient to the previous stage (B or I).
  bool input_grad() const { return op == PassOp::kBackward || op == PassOp::kInputGrad; }
  // Whether the micro-batch's activations on this chunk are free after the pass (B or W).
  bool releases() const { return op == PassOp::kBackward || op == PassOp::kWeightGrad; }
  bool operator==(const PipelinePass& o) const {
    return op == o.op && microbatch == o.microbatch && chunk == o.chunk &&
           overlapped == o.overlapped;
  }
};
// "F3.1" (forward of micro-batch 3 on chunk 1), "B", "I", "W"; an overlapped pair "F3.1&B0.0".
std::string to_string(const PipelinePass& p);

// Megatron's rules: P, V, M ≥ 1; interleaving (V > 1) needs P ≥ 2, P ≤ N ≤ M, and M mod N
// either 0 or ≥ P (a smaller last group deadlocks: simulate_pipeline finds the cycle). 1f1b and
// zb1p: V = 1. The V schedules: V = 2; dualpipev M ≥ 2P (DeepSeek's rule). One moet::Error line
// naming the flag otherwise.
void check_pipeline_schedule(const PipelineScheduleSpec& s);

// Forward passes rank r runs before its first backward: 1F1B min(P − r − 1, M); interleaved
// min(2(P − r − 1) + (V − 1)·N (+1 with EP overlap), M·V).
int64_t pipeline_warmup_passes(const PipelineScheduleSpec& s, int64_t rank);

// Rank r's passes in order: M·V forwards, and M·V backwards (B, or I and W apart).
std::vector<PipelinePass> pipeline_schedule(const PipelineScheduleSpec& s, int64_t rank);
// Every rank's list at once (zb1p's are made together: cheaper than P calls of the above).
std::vector<std::vector<PipelinePass>> pipeline_schedules(const PipelineScheduleSpec& s);

// Every rank's list run against the data dependencies, each pass taking forward_s or
// backward_s (per virtual stage: the whole backward; an I takes (1 − weight_share) of it, a W
// weight_share) and each hop between ranks p2p_s: forward (m, stage k) after forward (m, k − 1);
// the input gradient of (m, k) after that of (m, k + 1), the last stage's after its own forward;
// an overlapped pair starts when both its passes can and ends when both have run. Throws
// moet::Error if the lists deadlock (they never do for a valid spec).
struct PipelineTiming {
  double step_s = 0;                   // until the last pass ends
  double ideal_s = 0;                  // the busiest rank's compute: M·V·(forward_s + backward_s)
  double bubble_fraction = 0;          // step_s / ideal_s − 1
  std::vector<int64_t> max_in_flight;  // per rank: most forwards whose backward (W) is not done
  std::vector<double> idle_s;          // per rank: step_s − its compute (its bubble)
};
PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double p2p_s = 0, double weight_share = 0.5);
// The same with each virtual stage's own pass times (stage k as pipeline_place numbers it);
// ideal_s is then the busiest rank's compute.
PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s,
                                 const std::vector<double>& forward_s,
                                 const std::vector<double>& backward_s, double p2p_s = 0,
                                 double weight_share = 0.5);

// The bubble the schedule's authors give for equal stages, per rank, in seconds of its idle time
// (FACTS §8; F, B the forward and whole backward of one chunk, W its weight gradient, F&B an
// overlapped pair taken as F + B): 1f1b (P−1)(F+B); zb1p (P−1)(F+B−2W); dualpipev
// (P−1)(F&B+B−3W) on P ranks (DeepSeek's PP/2 − 1 with PP = 2P stages). interleaved and zbv have
// no such closed form in these units: 0 is returned.
double pipeline_bubble_formula_s(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double weight_s);

}  // namespace moet

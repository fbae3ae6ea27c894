// The step as events on each pipeline rank: every pass (one micro-batch through one virtual
// stage, forward or backward) is a chain of intervals, each on the GPU's compute or on the
// expert exchange (dispatch and combine: NVLink and the NIC at once). The engine's schedule
// (src/parallel/pipeline_schedule.h) orders each rank's passes; with the all-to-all overlap on,
// a steady-state forward and the backward after it run as one combined pass (Megatron's
// combined 1F1B, moet's --a2a-overlap): their chains share the rank's compute and exchange, so
// one's exchange runs under the other's compute where the order allows it, and the exchange's
// kernels hold a share of the SMs, slowing the compute beside them. Exposed exchange, SM
// contention and pipeline bubble all come from this one run.
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/pipeline_schedule.h"

namespace moet::sim {

struct Interval {
  bool exchange = false;  // the expert all-to-all; otherwise compute
  double s = 0;           // seconds
};
using Chain = std::vector<Interval>;  // one pass, in order: each starts when the one before ends

struct TimelineOptions {
  double p2p_s = 0;          // each hop between pipeline ranks
  double sm_fraction = 0;    // compute slowed by this share while an exchange runs beside it
  bool pair_passes = false;  // combined 1F1B: a forward runs with the backward after it
  // moet's --a2a-overlap without a pipeline: each micro-batch split in two lanes whose passes
  // (the chains given, for half a micro-batch) run side by side
  bool two_lanes = false;
  // The share of a backward's compute that is its weight gradient (a W of the zero-bubble
  // schedules; its I keeps the rest and every exchange).
  double weight_share = 0.5;
  // Per virtual stage: what its I passes add to copy what their W reads (SlotCost::wgrad_copy;
  // empty: nothing).
  std::vector<double> input_copy_s;
};

// Per pipeline rank, over the step: compute (as given, and what the exchange's SMs added),
// exchange time with no compute beside it, and time with neither (waiting for other ranks).
struct RankTimeline {
  double compute = 0, contention = 0, exposed = 0, idle = 0, exchange = 0;
  double busy() const { return compute + contention + exposed; }
};
struct StepTimeline {
  double step_s = 0;
  std::vector<RankTimeline> ranks;
};

// The step of `spec` (its ep_overlap adds the warm-up forward that combined 1F1B needs; its kind
// picks the schedule, whose overlapped pairs run as combined passes) with virtual stage k's
// forward and backward chains fwd[k] and bwd[k] (stage k as pipeline_place numbers it).
StepTimeline run_step_timeline(const PipelineScheduleSpec& spec, const std::vector<Chain>& fwd,
                               const std::vector<Chain>& bwd, const TimelineOptions& opt);

}  // namespace moet::sim

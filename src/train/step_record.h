// A training step's metrics record (metrics/progress.h's StepMetrics) from what the step
// returned and what the run measured around it: the losses, the rates and MFU, the expert
// loads, the communication each dispatcher and the gradient sync counted (taken and reset), the
// pipeline's times and bytes, memory and the ETA. Adding a metric means adding it here.
#pragma once
#include <cstdint>
#include <vector>

#include "metrics/progress.h"
#include "train/train_step.h"

namespace moet {

struct ModelConfig;
struct ParallelRun;
struct TrainOptions;
class Communicator;

class StepRecorder {
 public:
  // peak_tflops: what MFU divides by (per rank).
  StepRecorder(const TrainOptions& o, const ModelConfig& cfg, ParallelRun& par, Communicator* world,
               double peak_tflops);

  // The record of step `step` (0-based): r its result, step_s its wall time, data_wait_s the
  // part spent waiting for its batch, elapsed_s since the loop began at first_step. Under --pp
  // every rank must call it (it gathers the stages' times).
  StepMetrics record(int64_t step, const StepResult& r, double step_s, double data_wait_s,
                     double elapsed_s, int64_t first_step);
  // Evaluation's expert exchanges belong to no training step: drops what they counted.
  void forget_exchanges();

  double flops_per_token() const { return flops_per_token_; }
  int64_t tokens_per_step() const { return tokens_per_step_; }  // the global batch's tokens

 private:
  void communication(StepMetrics& m);
  void pipeline(StepMetrics& m);

  const TrainOptions& o_;
  const ModelConfig& cfg_;
  ParallelRun& par_;
  Communicator* world_;
  int ranks_;
  double peak_tflops_, flops_per_token_;
  int64_t tokens_per_step_;
  std::vector<int64_t> moe_layer_index_;  // --log-expert-load: each MoE layer's decoder index
};

}  // namespace moet

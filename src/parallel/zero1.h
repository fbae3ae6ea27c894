// Zero1: ZeRO stage 1 — the AdamW moments sharded over data parallelism. Each run of the
// gradient arena that DataParallel reduces as one bucket is split into one contiguous range per
// rank of its group (the world for dense weights, the expert-data-parallel group for expert
// weights); the bucket is reduce-scattered instead of allreduced, each rank updates only its
// range with moments it alone keeps, and the updated parameters are all-gathered.
//
// The numbers are bitwise those of the unsharded step: the reduce-scatter adds each element in
// the allreduce's tree order; AdamW is element-wise; and the ranges start only where
// ops::sum_squares starts a chunk (every kSumSquaresChunk elements of a dense weight or of one
// expert's slice of an expert weight), so each rank computes whole chunk sums of its range and
// the global norm is put together from them in exactly the order AdamW::grad_square_sums uses.
#pragma once
#include <cstdint>
#include <vector>

#include "optim/adamw.h"
#include "parallel/comm_stream.h"
#include "parallel/layout.h"

namespace moet {

// ops::sum_squares' fixed chunk (src/kernels/cpu/elementwise.cpp, kSumChunk); a test checks that
// summing chunks of this size reproduces it.
constexpr int64_t kSumSquaresChunk = int64_t{1} << 13;

class Zero1 {
 public:
  // A run of trainable weights reduced together: arena elements [offset, offset + n).
  struct Run {
    int64_t offset = 0;
    int64_t n = 0;
    bool expert = false;
  };
  // moments: how this rank stores its shard of the moments (fp32 or bf16 each).
  Zero1(ParallelLayout& layout, ParamStore& params, const std::vector<Run>& runs,
        MomentDtypes moments = {});

  // Run i is split at bounds(i)[0..P] (relative to the run; P = its group's size).
  const int64_t* bounds(size_t run) const { return runs_[run].bounds.data(); }
  Communicator& group(size_t run) const { return *runs_[run].group; }
  // This rank's range of run i, relative to the run.
  int64_t begin(size_t run) const { return runs_[run].bounds[runs_[run].group->rank()]; }
  int64_t end(size_t run) const { return runs_[run].bounds[runs_[run].group->rank() + 1]; }

  // Σ g² per weight from the reduced ranges: bitwise AdamW::grad_square_sums on the fully
  // reduced gradients, expert entries summed over the expert-parallel group.
  void grad_square_sums(SquareSums& out);
  // Clips by the global gradient norm `norm`, updates this rank's ranges (AdamW at lr, step count
  // opt.steps_taken() + 1, which opt then records) and all-gathers the parameters. Returns the norm
  // before clipping.
  double step(AdamW& opt, double lr, double norm);
  // Records the parameter all-gather as a trace::kGradSync span.
  void set_trace(TraceRecorder* rec) { trace_.set_trace(rec); }
  // Bytes of AdamW moments this rank holds (m and v).
  int64_t moment_bytes() const { return moments_ * dtypes_.bytes_per_param(); }

  // The moments this rank keeps: run by run, arena elements [offset, offset + n) whose first
  // and second moments are the flat views m and v of n elements in their stored dtype
  // (checkpoints save and restore them).
  struct MomentRange {
    int64_t offset = 0;
    int64_t n = 0;
    Tensor m, v;
  };
  std::vector<MomentRange> moment_ranges();

 private:
  struct RunState {
    int64_t offset, n;
    bool expert;
    Communicator* group;
    std::vector<int64_t> bounds;
    int64_t moment_base;  // where this rank's range starts in m_ and v_
  };
  struct Chunk {
    int64_t at, len;  // arena elements
    int64_t slot;     // in dense_sq_ or expert_sq_
    bool mine;
  };
  // A trainable weight (arena elements [offset, offset + n) of run `run`): `units` square sums
  // (1, or one per expert) of `per_unit` chunks each, chunks_[first] on.
  struct WeightInfo {
    size_t run;
    int64_t offset, n;
    bool expert, decay;
    int64_t units, per_unit;
    size_t first;
  };
  ParallelLayout& layout_;
  ParamStore& params_;
  std::vector<RunState> runs_;
  std::vector<Chunk> chunks_;
  std::vector<WeightInfo> weights_;
  std::vector<double> dense_sq_, expert_sq_, expert_sums_;  // per chunk (by group); per weight
  MomentDtypes dtypes_;
  int64_t moments_ = 0;  // elements of each moment this rank keeps
  Arena m_, v_;          // zeroed at start
  InlineCommTrace trace_;
};

}  // namespace moet

// --deterministic, in one process or data/expert parallelism and under --pp: every sequence's
// gradient in fresh buffers, added in the canonical tree order (docs/parallel.md).
#include <algorithm>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/tree_sum.h"
#include "kernels/ops.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_norm.h"
#include "train/expert_source_trees.h"
#include "train/gradient_accumulation.h"
#include "train/gradient_tree.h"

namespace moet {

namespace {

// What both deterministic modes share: the accumulated sums over micro-batches, each sequence's
// losses, and the end of the step (sums into means).
class DeterministicSums : public GradientAccumulation {
 protected:
  DeterministicSums(Model& model, int64_t sequences, DataParallel* dp)
      : model_(model),
        dp_(dp),
        sequences_(sequences),
        accum_(size_t(model.params().numel()), 0.0f),
        leaf_losses_(size_t(sequences)) {
    MOET_CHECK(model.micro_batch() == 1 && sequences > 0,
               "--deterministic runs one sequence at a time: plan the model for micro-batch 1");
  }

  Model& model_;
  DataParallel* dp_;
  const int64_t sequences_;
  std::vector<float> accum_;
  std::vector<LossBreakdown> leaf_losses_;

  // adds the gradient range [begin, end) of this micro-batch `a` into the accumulated sums
  void accumulate_range(int64_t a, int64_t begin, int64_t end) {
    float* g = model_.params().all_grads().f32();
    Tensor part(g + begin, DType::F32, {end - begin});
    Tensor acc(accum_.data() + begin, DType::F32, {end - begin});
    if (a == 0)
      ops::copy(part, acc);
    else
      ops::add(acc, part, acc);
  }

  // tree over the sequences of leaf_losses_
  LossBreakdown sum_leaf_losses() const {
    const int S = int(sequences_);
    auto sum = [&](double LossBreakdown::*field) {
      return tree_sum<double>(0, S, [&](int s) { return leaf_losses_[size_t(s)].*field; });
    };
    return LossBreakdown{sum(&LossBreakdown::loss), sum(&LossBreakdown::lm_loss),
                         sum(&LossBreakdown::mtp_loss), sum(&LossBreakdown::balance_loss),
                         sum(&LossBreakdown::z_loss)};
  }

  // grads = the accumulated sums over ranks, micro-batches and sequences, divided by their
  // count; returns the mean of `total` likewise
  LossBreakdown finish(int64_t grad_accum, const LossBreakdown& total) {
    Tensor grads = model_.params().all_grads();
    const int64_t ranks = dp_ ? dp_->layout().size() : 1;
    const double inv = 1.0 / double(ranks * grad_accum * sequences_);
    std::memcpy(grads.f32(), accum_.data(), size_t(grads.numel()) * sizeof(float));
    ops::scale_inplace(grads, inv);
    LossBreakdown mean;
    add_losses(mean, total, inv);
    return mean;
  }
};

class DeterministicAccumulation final : public DeterministicSums {
 public:
  DeterministicAccumulation(Model& model, int64_t sequences, DataParallel* dp)
      : DeterministicSums(model, sequences, dp),
        tree_(model.params().numel()),
        expert_trees_(model.moe_layers()) {}

  LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) override {
    ParamStore& params = model_.params();
    Tensor grads = params.all_grads();
    const int64_t S = sequences_, per_seq = model_.seq_len() + 1;
    LossBreakdown total;
    for (int64_t a = 0; a < grad_accum; ++a) {
      tree_.reset();
      for (int64_t s = 0; s < S; ++s) {
        params.zero_grads();
        expert_trees_.zero();
        leaf_losses_[size_t(s)] = model_.forward(micro_batch(a) + s * per_seq, 1.0);
        model_.backward(1.0);
        tree_.push(grads.f32());
        expert_trees_.push();
      }
      tree_.finish(grads.f32());
      expert_trees_.finish();  // expert parallelism: the experts' gradients, source by source
      LossBreakdown l = sum_leaf_losses();
      if (dp_) {  // plain sums over the ranks, in the canonical order
        dp_->reduce_gradients(1.0);
        dp_->reduce_losses(l, 1.0);
      }
      accumulate_range(a, 0, params.numel());
      add_losses(total, l, 1.0);
    }
    return finish(grad_accum, total);
  }

 private:
  GradientTree tree_;
  ExpertSourceTrees expert_trees_;
};

class DeterministicPipelineAccumulation final : public DeterministicSums {
 public:
  DeterministicPipelineAccumulation(Model& model, int64_t sequences, PipelineExecutor& pipeline,
                                    Communicator& pp, DataParallel& dp)
      : DeterministicSums(model, sequences, &dp), pipeline_(pipeline), pp_(pp) {
    const ModelConfig& cfg = model_.config();
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      decoder_moe_count_ += cfg.is_moe_layer(l) ? 1 : 0;
    moe_count_ = cfg.num_moe_layers();
    for (int64_t c = 0; c < pipeline_.chunks(); ++c) chunk_trees_.push_back(chunk_tree(c));
    install_hooks();
  }

  LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) override {
    const int64_t S = sequences_, per_seq = model_.seq_len() + 1, row = 2 + 2 * moe_count_;
    seq_losses_.assign(size_t(grad_accum * S * row), 0.0);
    pipeline_.run_step([&](int64_t j) { return micro_batch(j / S) + (j % S) * per_seq; }, 1.0);
    // every stage filled its part of each sequence's row (the rest is +0)
    pp_.allreduce_sum(seq_losses_.data(), int64_t(seq_losses_.size()));
    LossBreakdown total;
    for (int64_t a = 0; a < grad_accum; ++a) {
      for (int64_t s = 0; s < S; ++s) {  // one process's forward_end, sequence by sequence
        const double* r = seq_losses_.data() + (a * S + s) * row;
        LossBreakdown& l = leaf_losses_[size_t(s)];
        l = LossBreakdown{};
        l.lm_loss = r[0], l.mtp_loss = r[1];
        for (int64_t i = 0; i < moe_count_; ++i) {
          l.balance_loss += r[2 + i];
          l.z_loss += r[2 + moe_count_ + i];
        }
        l.loss = model_.total_loss(l);
      }
      LossBreakdown l = sum_leaf_losses();
      dp_->reduce_losses(l, 1.0);
      add_losses(total, l, 1.0);
    }
    return finish(grad_accum, total);
  }

 private:
  // Each chunk's arena range and tree, and whose gradients the range holds.
  struct ChunkTree {
    int64_t begin = 0, end = 0;
    std::unique_ptr<GradientTree> tree;
    std::unique_ptr<ExpertSourceTrees> experts;  // its experts' gradients per source (--ep)
    int64_t owner = -1;  // the sequence whose passes write the range now (-1: none)
    // sequences whose gradients are partial (an I before its W) while another's passes run
    struct Partial {
      std::vector<float> grads, expert_parts;
    };
    std::map<int64_t, Partial> parked;
  };
  PipelineExecutor& pipeline_;
  Communicator& pp_;
  std::vector<ChunkTree> chunk_trees_;
  // per sequence: the LM and MTP losses and each MoE layer's balance and z losses (global MoE
  // layer order)
  std::vector<double> seq_losses_;
  int64_t moe_count_ = 0, decoder_moe_count_ = 0;

  ChunkTree chunk_tree(int64_t c) {
    const int64_t L = model_.config().num_hidden_layers;
    ParamStore& params = model_.params();
    const ModelPart& part = pipeline_.chunk_model(c).part();
    auto mine = [&](const Weight& w) {
      const int64_t g = declaration_group(w.name, L);
      if (g == 0) return part.embedding || (part.loss && w.replica);
      if (g <= L) return part.first_layer <= g - 1 && g - 1 < part.end_layer;
      return part.loss;
    };
    ChunkTree t;
    t.begin = params.numel();
    int64_t covered = 0;
    for (const Weight& w : params.weights())
      if (mine(w)) {
        t.begin = std::min(t.begin, w.offset);
        t.end = std::max(t.end, w.offset + w.value.numel());
        covered += w.value.numel();
      }
    MOET_ASSERT(covered == t.end - t.begin);  // a chunk's weights are contiguous
    t.tree = std::make_unique<GradientTree>(t.end - t.begin);
    std::vector<std::vector<MoeLayer*>> others;
    for (int64_t k = 1; k < pipeline_.chunk_slots(c); ++k)
      others.push_back(pipeline_.chunk_model(c, k).moe_layers());
    t.experts = std::make_unique<ExpertSourceTrees>(pipeline_.chunk_model(c).moe_layers(), others);
    return t;
  }

  // Sequence j's passes write chunk t's gradients next: the range (and the experts' per-source
  // parts) holds j's partial gradients, or zeros for j's first pass. Another sequence's partial
  // gradients there are parked until its next pass.
  void enter(ChunkTree& t, int64_t j) {
    if (t.owner == j) return;
    float* g = model_.params().all_grads().f32() + t.begin;
    const size_t n = size_t(t.end - t.begin);
    if (t.owner >= 0) {
      ChunkTree::Partial& p = t.parked[t.owner];
      p.grads.assign(g, g + n);
      t.experts->save_parts(p.expert_parts);
    }
    auto it = t.parked.find(j);
    if (it == t.parked.end()) {
      std::fill(g, g + n, 0.0f);
      t.experts->zero();
    } else {
      std::copy(it->second.grads.begin(), it->second.grads.end(), g);
      t.experts->load_parts(it->second.expert_parts);
      t.parked.erase(it);
    }
    t.owner = j;
  }

  void install_hooks() {
    const int64_t S = sequences_, row = 2 + 2 * moe_count_;
    PipelineExecutor::GradientHooks hooks;
    hooks.enter = [this](int64_t c, int64_t j) { enter(chunk_trees_[size_t(c)], j); };
    hooks.done = [this, S](int64_t c, int64_t j) {
      ChunkTree& t = chunk_trees_[size_t(c)];
      MOET_ASSERT(t.owner == j);
      float* g = model_.params().all_grads().f32();
      t.tree->push(g + t.begin);
      t.experts->push();
      t.owner = -1;
      if (j % S != S - 1) return;
      // the chunk has every sequence of micro-batch j / S: its sum, over the ranks, accumulated
      t.tree->finish(g + t.begin);
      t.tree->reset();
      t.experts->finish();
      dp_->reduce_gradient_range(t.begin, t.end, 1.0);
      accumulate_range(j / S, t.begin, t.end);
    };
    hooks.forward_done = [this, row](int64_t, int64_t j, Model& m, const LossBreakdown& l) {
      double* r = seq_losses_.data() + j * row;
      if (m.part().loss) r[0] = l.lm_loss, r[1] = l.mtp_loss;
      // the chunk's MoE layers are its decoder layers' in order, then the MTP modules'
      int64_t first = 0, decoder = 0;
      for (int64_t i = 0; i < m.part().end_layer; ++i)
        (i < m.part().first_layer ? first : decoder) += m.config().is_moe_layer(i) ? 1 : 0;
      for (int64_t i = 0; i < int64_t(m.moe_layers().size()); ++i) {
        const int64_t g = i < decoder ? first + i : decoder_moe_count_ + (i - decoder);
        r[2 + g] = m.moe_layers()[size_t(i)]->last_balance_loss();
        r[2 + moe_count_ + g] = m.moe_layers()[size_t(i)]->last_z_loss();
      }
    };
    pipeline_.set_gradient_hooks(std::move(hooks));
  }
};

}  // namespace

std::unique_ptr<GradientAccumulation> deterministic_accumulation(Model& model, int64_t sequences,
                                                                 DataParallel* data_parallel) {
  return std::make_unique<DeterministicAccumulation>(model, sequences, data_parallel);
}

std::unique_ptr<GradientAccumulation> deterministic_pipeline_accumulation(
    Model& model, int64_t sequences, PipelineExecutor& pipeline, Communicator& pp,
    DataParallel& data_parallel) {
  return std::make_unique<DeterministicPipelineAccumulation>(model, sequences, pipeline, pp,
                                                             data_parallel);
}

}  // namespace moet

// --a2a-overlap: two lanes over one set of parameters, each taking half of every micro-batch.
#include "core/error.h"
#include "parallel/data_parallel.h"
#include "train/gradient_accumulation.h"

namespace moet {

namespace {

class TwoLaneAccumulation final : public GradientAccumulation {
 public:
  TwoLaneAccumulation(Model& model, Model& lane, bool interleave, DataParallel* dp)
      : lanes_{&model, &lane}, interleave_(interleave), dp_(dp) {}

  LossBreakdown run(int64_t grad_accum, const MicroBatchFn& micro_batch) override {
    Model& model = *lanes_[0];
    model.params().zero_grads();
    LossBreakdown losses;
    // Each lane half of the micro-batch (the first lane the first half of the sequences).
    const int64_t half = model.micro_batch() * (model.seq_len() + 1);
    const double scale = 1.0 / double(2 * grad_accum);
    for (int64_t a = 0; a < grad_accum; ++a) {
      const int32_t* tokens = micro_batch(a);
      lanes_[0]->forward_begin(tokens, scale);
      lanes_[1]->forward_begin(tokens + half, scale);
      run_stages(true);
      LossBreakdown l0 = lanes_[0]->forward_end(), l1 = lanes_[1]->forward_end();
      if (dp_ && a + 1 == grad_accum) dp_->arm();
      lanes_[0]->backward_begin(scale);
      lanes_[1]->backward_begin(scale);
      run_stages(false);
      lanes_[0]->backward_end();
      lanes_[1]->backward_end();
      add_losses(losses, l0, scale);
      add_losses(losses, l1, scale);
    }
    if (dp_) {
      dp_->reduce_gradients();
      dp_->reduce_losses(losses);
    }
    return losses;
  }

 private:
  Model* lanes_[2];
  bool interleave_;
  DataParallel* dp_;

  void run_stages(bool forward) {
    const int64_t layers = lanes_[0]->num_layers();
    auto stage = [&](int k, int64_t l, MoeStage s) {
      forward ? lanes_[k]->forward_stage(l, s) : lanes_[k]->backward_stage(l, s);
    };
    if (!interleave_) {
      for (int64_t i = 0; i < layers; ++i)
        for (int k = 0; k < 2; ++k)
          for (MoeStage s : kMoeStages) stage(k, forward ? i : layers - 1 - i, s);
      return;
    }
    // Both lanes' stages between the first and the last, in turn.
    auto middle = [&](int64_t l) {
      for (size_t s = 1; s + 1 < kMoeStages.size(); ++s) {
        stage(0, l, kMoeStages[s]);
        stage(1, l, kMoeStages[s]);
      }
    };
    if (!forward) {
      // Backward, layers down, the same pattern: B's last exchange of a layer (its input
      // gradients) travels under A's first stage of the next layer down.
      for (int64_t l = layers; l-- > 0;) {
        stage(0, l, kFirstMoeStage);
        if (l + 1 < layers) stage(1, l + 1, kLastMoeStage);
        stage(1, l, kFirstMoeStage);
        middle(l);
        stage(0, l, kLastMoeStage);
      }
      stage(1, 0, kLastMoeStage);
      return;
    }
    // Forward: A's dispatch travels under B's attention, B's under A's experts, A's combine
    // under B's experts, and B's combine under A's attention of the next layer.
    for (int64_t l = 0; l < layers; ++l) {
      stage(0, l, kFirstMoeStage);
      if (l > 0) stage(1, l - 1, kLastMoeStage);
      stage(1, l, kFirstMoeStage);
      middle(l);
      stage(0, l, kLastMoeStage);
    }
    stage(1, layers - 1, kLastMoeStage);
  }
};

}  // namespace

std::unique_ptr<GradientAccumulation> two_lane_accumulation(Model& model, Model& lane,
                                                            bool interleave,
                                                            DataParallel* data_parallel) {
  MOET_ASSERT(&lane.params() == &model.params());  // the lane shares the model's parameters
  return std::make_unique<TwoLaneAccumulation>(model, lane, interleave, data_parallel);
}

std::vector<std::pair<MoeLayer*, MoeLayer*>> second_lane_merges(Model& model, Model& lane) {
  std::vector<std::pair<MoeLayer*, MoeLayer*>> out;
  for (size_t i = 0; i < model.moe_layers().size(); ++i)
    out.emplace_back(lane.moe_layers()[i], model.moe_layers()[i]);
  return out;
}

}  // namespace moet

// The pipeline executor's bookkeeping (docs/pipeline.md): which slots of the model each virtual
// stage holds (pipeline_parts), how many micro-batches each chunk keeps in flight
// (slots_per_chunk, which sets the activation memory), and the declaration order the pipeline
// gradient norm restores (declaration_group). The executor itself runs in mpi_pipeline_cli.
#include <gtest/gtest.h>

#include <cmath>

#include "error_of.h"
#include "model/config.h"
#include "model/model.h"
#include "parallel/pipeline_executor.h"
#include "parallel/pipeline_norm.h"
#include "train/parallelize.h"

namespace moet {
namespace {

ModelConfig config(int64_t layers, int64_t mtp) {
  ModelConfig c = load_model_config(std::string(MOET_SOURCE_DIR) + "/configs/tiny.json");
  c.num_hidden_layers = layers;
  c.num_nextn_predict_layers = mtp;
  return c;
}

TEST(PipelineParts, DeepSeekV3LayoutOnPp2Vpp8) {
  const auto parts = pipeline_parts(config(61, 1), "Et*4|(t*4|)*14tmL", 16);
  ASSERT_EQ(parts.size(), 16u);
  EXPECT_TRUE(parts[0].embedding);
  EXPECT_EQ(parts[0].first_layer, 0);
  EXPECT_EQ(parts[0].end_layer, 4);
  EXPECT_FALSE(parts[0].loss);
  for (size_t k = 1; k < 15; ++k) {
    EXPECT_FALSE(parts[k].embedding || parts[k].loss) << k;
    EXPECT_EQ(parts[k].end_layer - parts[k].first_layer, 4) << k;
    EXPECT_EQ(parts[k].first_layer, parts[k - 1].end_layer) << k;
  }
  EXPECT_EQ(parts[15].first_layer, 60);
  EXPECT_EQ(parts[15].end_layer, 61);
  EXPECT_TRUE(parts[15].loss);
}

TEST(PipelineParts, EvenSplitWithoutALayout) {
  const auto parts = pipeline_parts(config(8, 1), "", 4);
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_EQ(parts[size_t(k)].first_layer, 2 * k);
    EXPECT_EQ(parts[size_t(k)].end_layer, 2 * k + 2);
  }
  EXPECT_TRUE(parts[0].embedding && parts[3].loss);
}

TEST(PipelineParts, StagesWithoutLayersAndRefusals) {
  const auto parts = pipeline_parts(config(3, 1), "E|ttt|mL", 3);
  EXPECT_EQ(parts[0].end_layer, 0);
  EXPECT_EQ(parts[2].first_layer, 3);
  EXPECT_EQ(parts[2].end_layer, 3);
  auto err = [](const std::string& layout, int64_t stages) {
    return test::error_of([&] { pipeline_parts(config(3, 1), layout, stages); });
  };
  EXPECT_NE(err("", 2).find("do not split evenly over 2"), std::string::npos);
  EXPECT_NE(err("Ettt|mL|", 3).find("puts the loss on virtual stage 1"), std::string::npos);
  EXPECT_NE(err("Etttm|L", 2).find("MTP layers on the loss's stage"), std::string::npos);
  EXPECT_NE(err("Et||ttmL", 3).find("virtual stage 1 holds nothing"), std::string::npos);
}

// 1F1B: stage r keeps min(P − r, M) micro-batches; interleaving: chunk by chunk, what the
// schedule's passes leave in flight.
TEST(PipelineSlots, FollowTheSchedule) {
  PipelineScheduleSpec s;
  s.stages = 4;
  s.microbatches = 8;
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(PipelineExecutor::slots_per_chunk(s, r), std::vector<int64_t>{4 - r}) << r;
  s.microbatches = 2;
  EXPECT_EQ(PipelineExecutor::slots_per_chunk(s, 0), std::vector<int64_t>{2});
  s.microbatches = 8;
  s.chunks = 2;
  for (int64_t r = 0; r < 4; ++r) {
    const auto slots = PipelineExecutor::slots_per_chunk(s, r);
    ASSERT_EQ(slots.size(), 2u);
    // together at least the schedule's (micro-batch, chunk) pairs in flight at once
    int64_t most = 0, now = 0;
    for (const PipelinePass& p : pipeline_schedule(s, r)) {
      now += p.forward() ? 1 : -1;
      most = std::max(most, now);
    }
    EXPECT_GE(slots[0] + slots[1], most) << r;
    EXPECT_LE(slots[0], 8);
    EXPECT_GE(slots[1], 1);
  }
}

// The order one process declares its weights in, which the pipeline's gradient norm restores.
TEST(PipelineNorm, DeclarationGroupsFollowOneProcess) {
  ModelConfig c = config(3, 1);
  Model m(c, {.micro_batch = 1, .seq_len = 8});
  int64_t last = -1;
  for (const Weight& w : m.params().weights()) {
    const int64_t g = declaration_group(w.name, c.num_hidden_layers);
    EXPECT_GE(g, last) << w.name;
    last = g;
  }
  EXPECT_EQ(declaration_group("model.layers.3.eh_proj.weight", 3), 6);
  EXPECT_EQ(declaration_group("lm_head.weight", 3), 4);
  EXPECT_EQ(declaration_group("model.norm.weight", 3), 5);
}

// The norm adds dense entries in order, then expert entries in order, wherever they came from.
TEST(PipelineNorm, SquareSumsAddDenseThenExperts) {
  SquareSums s;
  s.sq = {1e16, 3.0, 1.0, -1e16};
  s.expert = {0, 1, 0, 0};
  // dense: ((1e16 + 1) − 1e16) = 0 in doubles, then + 3
  EXPECT_EQ(s.norm(), std::sqrt(3.0));
}

}  // namespace
}  // namespace moet

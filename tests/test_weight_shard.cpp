// Tensor-parallel parts of weights (WeightShard, model/params.h): a part initialises to the whole
// weight's values at its place — rows of the column-parallel up-projections and of both blocks of
// SwiGLU's fused gate/up weight, columns of the row-parallel o and down projections — and its
// checkpoint pieces land there in the whole tensor, so the parts' pieces of every weight
// assemble the whole store one process saves.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "checkpoint/training_state.h"
#include "core/file_io.h"
#include "model/attention.h"
#include "model/config.h"
#include "model/mlp.h"
#include "model/params.h"
#include "model/tensor_parallel.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

// An attention layer and an MLP of tiny.json as part `part` of `parts` (parts 1: whole).
struct Layers {
  ParamStore ps;
  std::unique_ptr<MlaAttention> attn;
  std::unique_ptr<SwiGluMlp> mlp;
  Layers(const ModelConfig& c, int64_t part, int64_t parts) {
    const TensorParallel tp{.part = part, .parts = parts};
    attn =
        std::make_unique<MlaAttention>(c, ps, "a.", ops::LinearPrecision{}, ops::Format::F32, tp);
    mlp = std::make_unique<SwiGluMlp>(c.hidden_size, c.intermediate_size, ps, "m.",
                                      ops::LinearPrecision{}, tp);
    ps.allocate();
    ps.initialize(7, 0.02);
  }
};

// Every tensor of the store's checkpoint pieces, written into whole tensors.
void assemble(ParamStore& ps, std::map<std::string, std::vector<float>>& whole) {
  StateHolder h;
  h.params = &ps;
  for (const StatePiece& p : training_state_pieces(h, false)) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    std::vector<float>& t = whole[p.tensor];
    if (t.empty()) t.assign(size_t(n), -1.f);  // -1: no piece wrote it
    ASSERT_EQ(int64_t(t.size()), n) << p.tensor;
    ASSERT_LE(p.begin + p.n, n) << p.tensor;
    std::copy_n(p.data, p.n, t.begin() + p.begin);
  }
}

TEST(WeightShard, PartsInitialiseAndSaveAsTheWholeWeight) {
  const ModelConfig c =
      parse_model_config(read_text_file(kRoot + "/configs/tiny.json"), "tiny.json");
  Layers one(c, 0, 1);
  std::map<std::string, std::vector<float>> want, got2, got4;
  assemble(one.ps, want);
  for (int64_t parts : {2, 4}) {
    std::map<std::string, std::vector<float>>& got = parts == 2 ? got2 : got4;
    for (int64_t part = 0; part < parts; ++part) {
      Layers l(c, part, parts);
      assemble(l.ps, got);
    }
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, values] : want) {
      SCOPED_TRACE(name + " over " + std::to_string(parts) + " parts");
      EXPECT_EQ(got.at(name), values);
    }
  }
  // the split weights really are parts: a part holds a quarter of o's columns
  Layers quarter(c, 3, 4);
  for (const Weight& w : quarter.ps.weights())
    if (w.name == "a.o_proj.weight") {
      EXPECT_EQ(w.value.size(1) * 4, w.whole_shape()[1]);
      const Weight* whole = nullptr;
      for (const Weight& o : one.ps.weights())
        if (o.name == w.name) whole = &o;
      ASSERT_NE(whole, nullptr);
      const int64_t cols = w.value.size(1), all = whole->value.size(1);
      for (int64_t r = 0; r < w.value.size(0); r += 7)
        for (int64_t j = 0; j < cols; ++j)
          ASSERT_EQ(w.value.f32()[r * cols + j], whole->value.f32()[r * all + 3 * cols + j]);
    }
}

// A run never crosses a block: the fused gate/up weight's part maps to two row ranges.
TEST(WeightShard, RunsFollowTheBlocks) {
  ParamStore ps;
  Weight* w = ps.declare("gu", {8, 3}, Init::Normal, true);  // part 1 of 2 of a [16, 3] weight
  ps.set_shard(w, {.dim = 0, .segments = 2, .part = 1, .parts = 2});
  std::vector<std::array<int64_t, 3>> runs;
  w->for_each_run(0, 24, [&](int64_t local, int64_t whole, int64_t n) {
    runs.push_back({local, whole, n});
  });
  // gate rows 4..7 of 0..7, then up rows 12..15 of 8..15
  EXPECT_EQ(runs, (std::vector<std::array<int64_t, 3>>{{0, 12, 12}, {12, 36, 12}}));
  runs.clear();
  w->for_each_run(5, 10, [&](int64_t local, int64_t whole, int64_t n) {
    runs.push_back({local, whole, n});
  });
  EXPECT_EQ(runs, (std::vector<std::array<int64_t, 3>>{{5, 17, 7}, {12, 36, 3}}));
}

}  // namespace
}  // namespace moet

// Training behaviour: bad options are one line naming the flag; same seed → bitwise-identical
// losses; --deterministic trains the same
// model as the batched step (to rounding); the loss goes down on real text; the metrics file has
// the promised keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "error_of.h"
#include "model/model.h"
#include "train/checkpointing.h"
#include "train/train_options.h"
#include "train/train_options_check.h"
#include "train/train_step.h"
#include "train/trainer.h"

namespace moet {
namespace {

const std::string kRoot = MOET_SOURCE_DIR;

std::vector<double> train_losses(const TokenDataset& ds, int64_t steps, uint64_t seed,
                                 bool deterministic = false) {
  ModelConfig cfg = load_model_config(kRoot + "/configs/tiny.json");
  const int64_t B = 2, T = 16, A = 2;
  Model m(cfg, {.micro_batch = deterministic ? 1 : B, .seq_len = T});
  m.init_parameters(seed);
  LrSchedule sched;
  sched.max_lr = 3e-3;
  sched.min_lr = 3e-4;
  sched.warmup = 2;
  sched.total = steps;
  StepPlan plan;
  if (deterministic) plan.accumulation = deterministic_accumulation(m, B, nullptr);
  StepRunner runner(m, AdamWConfig{}, sched, 1e-3, std::move(plan));
  std::vector<int32_t> tok(A * B * (T + 1));
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t a = 0; a < A; ++a) ds.next_batch(s, a, B, T, tok.data() + a * B * (T + 1));
    losses.push_back(
        runner.run(s, A, [&](int64_t a) { return tok.data() + a * B * (T + 1); }).losses.loss);
  }
  return losses;
}

TEST(Train, SameSeedGivesBitwiseIdenticalLosses) {
  MockDataset ds(257, 7);
  std::vector<double> a = train_losses(ds, 5, 42), b = train_losses(ds, 5, 42);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  std::vector<double> c = train_losses(ds, 5, 43);
  EXPECT_NE(a[0], c[0]) << "a different seed must give a different model";
}

TEST(Train, DeterministicModeTrainsTheSameModel) {
  MockDataset ds(257, 7);
  std::vector<double> batched = train_losses(ds, 6, 42), det = train_losses(ds, 6, 42, true);
  for (size_t i = 0; i < det.size(); ++i)
    EXPECT_NEAR(det[i], batched[i], 1e-5 * std::abs(batched[i])) << "step " << i;
  EXPECT_EQ(det, train_losses(ds, 6, 42, true)) << "and it repeats bit for bit";
}

TEST(Train, LossGoesDownOnRealText) {
  TextDataset ds({default_corpus_path()}, 3);
  std::vector<double> l = train_losses(ds, 40, 1);
  double first = (l[0] + l[1] + l[2]) / 3, last = (l[37] + l[38] + l[39]) / 3;
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
}

TEST(Train, MetricsFileHasOneObjectPerStepWithTheKeys) {
  std::string path = std::filesystem::temp_directory_path() / "moet_test_metrics.jsonl";
  std::filesystem::remove(path);
  TrainOptions o;
  o.model_path = kRoot + "/configs/tiny.json";
  o.data.spec = "mock";
  o.optim.steps = 3;
  o.data.micro_batch = 2;
  o.data.seq = 16;
  o.logging.metrics_path = path;
  o.logging.quiet = true;
  o.logging.peak_tflops = 0.1;
  run_training(o);
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k :
         {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tflops", "mfu", "max_expert_load"})
      EXPECT_TRUE(j.contains(k) && j[k].is_number()) << k << " in " << line;
    EXPECT_EQ(j["step"].get<int>(), ++n);
  }
  EXPECT_EQ(n, 3);
  // A second run must not overwrite it.
  EXPECT_THROW(run_training(o), Error);
  std::filesystem::remove(path);
}

// run.json's and checkpoint.json's options read back are the options written: every field of
// every group set away from its default survives the round trip; a wrong type or an unknown
// word is one line naming the key.
TEST(TrainOptions, FromJsonReadsBackWhatToJsonWrote) {
  TrainOptions o;
  o.model_path = "m.json";
  o.data.spec = "a.txt", o.data.tokenizer = "t.json", o.data.split = "90,10";
  o.data.doc_boundary = DocBoundary::kBlankLine, o.data.json_key = "content";
  o.data.prefetch = 0, o.data.micro_batch = 3, o.data.seq = 17, o.data.grad_accum = 5;
  o.data.seed = 18446744073709551615ull;
  o.optim.steps = 9, o.optim.lr = 2e-4, o.optim.min_lr = 3e-5, o.optim.warmup = 2;
  o.optim.schedule = LrSchedule::Kind::Constant, o.optim.override_opt_param_scheduler = true;
  o.optim.weight_decay = 0.25, o.optim.grad_clip = 0.5, o.optim.mtp_lambda = 0.125;
  o.optim.balance_alpha = 1e-3, o.optim.z_loss_coef = 1e-5, o.optim.bias_update_rate = 1e-4;
  o.optim.use_precision_aware_optimizer = true;
  o.optim.exp_avg_dtype = o.optim.exp_avg_sq_dtype = MomentDtype::kBf16;
  o.precision.recipe = Recipe::FP8Blockwise, o.precision.bf16_layers = 2;
  o.parallel.threads = 3, o.parallel.ep = 2, o.parallel.ep_ranks_per_node = 1;
  o.parallel.overlap = OverlapMode::kOff, o.parallel.dispatcher = DispatcherKind::kAllGather;
  o.parallel.a2a_overlap = o.parallel.zero1 = o.parallel.deterministic = true;
  o.parallel.pp = 2, o.parallel.vpp = 2, o.parallel.pp_layout = "Et|tL";
  o.recompute.granularity = RecomputeGranularity::kSelective;
  o.recompute.modules = {RecomputeModule::kMoeAct, RecomputeModule::kLayernorm};
  o.recompute.method = RecomputeMethod::kBlock, o.recompute.num_layers = 2;
  o.checkpoint.out_dir = "run", o.checkpoint.save_every = 4, o.checkpoint.keep_last = 2;
  o.checkpoint.resume = "auto", o.checkpoint.sync_save = true, o.checkpoint.skip_nonfinite = 3;
  o.checkpoint.init_from = "hf";
  o.logging.metrics_path = "m.jsonl", o.logging.overwrite = true, o.logging.log_every = 7;
  o.logging.tensorboard_dir = "tb", o.logging.log_expert_load = 2, o.logging.eval_every = 5;
  o.logging.eval_batches = 6, o.logging.peak_tflops = 1.5, o.logging.quiet = true;
  o.logging.trace_path = "t.json";
  const nlohmann::json j = to_json(o);
  const TrainOptions back = train_options_from_json(j, "run.json");
  EXPECT_EQ(to_json(back).dump(), j.dump());
  EXPECT_EQ(to_json(train_options_from_json(to_json(TrainOptions{}), "x")).dump(),
            to_json(TrainOptions{}).dump());  // and the defaults, nulls included
  EXPECT_EQ(back.data.doc_boundary, DocBoundary::kBlankLine);
  EXPECT_EQ(back.parallel.dispatcher, DispatcherKind::kAllGather);
  EXPECT_EQ(*back.precision.recipe, Recipe::FP8Blockwise);
  EXPECT_EQ(back.data.seed, o.data.seed);
  EXPECT_EQ(back.recompute.modules, o.recompute.modules);
  EXPECT_EQ(back.recompute.plan().describe(), "selective (moe_act layernorm)");

  nlohmann::json bad = j;
  bad["parallel"]["overlap"] = "sometimes";
  EXPECT_EQ(test::error_of([&] { train_options_from_json(bad, "c.json run"); }),
            "c.json run: options.parallel.overlap 'sometimes' is not one of auto, on, off");
  bad = j;
  bad["data"]["seq"] = "256";
  EXPECT_EQ(test::error_of([&] { train_options_from_json(bad, "c.json run"); }),
            "c.json run: options.data.seq is not an integer: \"256\"");
  bad = j;
  bad["data"]["seed"] = -1;
  EXPECT_EQ(test::error_of([&] { train_options_from_json(bad, "c.json run"); }),
            "c.json run: options.data.seed is not an integer >= 0: -1");
  bad = j;
  bad["optim"] = 3;
  EXPECT_EQ(test::error_of([&] { train_options_from_json(bad, "c.json run"); }),
            "c.json run: options.optim is not an object");
}

// checkpoint.json's run: the options as to_json wrote them; a checkpoint of an earlier moet
// recorded some as flat fields of run; an imported checkpoint records none.
TEST(TrainOptions, CheckpointRunOptionsFromOptionsOrEarlierFlatFields) {
  TrainOptions o;
  o.data.seq = 64, o.data.grad_accum = 3;
  const nlohmann::json now = {{"options", to_json(o)}, {"precision", "fp32"}};
  std::optional<TrainOptions> r = checkpoint_run_options(now, "c");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data.seq, 64);
  EXPECT_EQ(r->data.grad_accum, 3);
  const nlohmann::json earlier = {
      {"seq", 32}, {"grad_accum", 2},     {"data", "x.txt"},   {"doc_boundary", "file"},
      {"ep", 2},   {"precision", "bf16"}, {"eval_batches", 7}, {"command_line", "moet train"}};
  r = checkpoint_run_options(earlier, "c");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->data.seq, 32);
  EXPECT_EQ(r->data.grad_accum, 2);
  EXPECT_EQ(r->data.spec, "x.txt");
  EXPECT_EQ(r->data.doc_boundary, DocBoundary::kFile);
  EXPECT_EQ(r->parallel.ep, 2);
  EXPECT_EQ(r->logging.eval_batches, 7);
  EXPECT_FALSE(checkpoint_run_options(nlohmann::json::object(), "c"));
  EXPECT_FALSE(checkpoint_run_options(nullptr, "c"));
}

TEST(TrainOptions, EachBadNumberIsOneLineNamingTheFlag) {
  const double nan = std::nan(""), inf = HUGE_VAL;
  const auto refused = [](const std::string& flag, auto set) {
    TrainOptions o;
    o.model_path = kRoot + "/configs/tiny.json";
    set(o);
    const std::string e = test::error_of([&] { check_train_options(o); });
    EXPECT_EQ(e.rfind(flag, 0), 0u) << flag << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.find(".cpp"), std::string::npos) << e;
  };
  for (double v : {nan, inf, -inf, -1.0}) {
    refused("--lr", [&](TrainOptions& o) { o.optim.lr = v; });
    refused("--min-lr", [&](TrainOptions& o) { o.optim.min_lr = v; });
    refused("--weight-decay", [&](TrainOptions& o) { o.optim.weight_decay = v; });
    refused("--grad-clip", [&](TrainOptions& o) { o.optim.grad_clip = v; });
    refused("--mtp-lambda", [&](TrainOptions& o) { o.optim.mtp_lambda = v; });
    refused("--balance-alpha", [&](TrainOptions& o) { o.optim.balance_alpha = v; });
    refused("--z-loss", [&](TrainOptions& o) { o.optim.z_loss_coef = v; });
    refused("--bias-update-rate", [&](TrainOptions& o) { o.optim.bias_update_rate = v; });
    refused("--peak-tflops", [&](TrainOptions& o) { o.logging.peak_tflops = v; });
  }
  refused("--min-lr", [](TrainOptions& o) { o.optim.min_lr = o.optim.lr * 2; });
  refused("--warmup", [](TrainOptions& o) { o.optim.warmup = -1; });
  refused("--warmup", [](TrainOptions& o) { o.optim.warmup = o.optim.steps + 1; });
  refused("--peak-tflops", [](TrainOptions& o) { o.logging.peak_tflops = 0.0; });
  refused("--steps", [](TrainOptions& o) { o.optim.steps = 0; });
  refused("--seq", [](TrainOptions& o) { o.data.seq = 1; });
  refused("--threads", [](TrainOptions& o) { o.parallel.threads = -1; });
  refused("--skip-nonfinite", [](TrainOptions& o) { o.checkpoint.skip_nonfinite = -1; });
  refused("--deterministic",
          [](TrainOptions& o) { o.parallel.deterministic = o.parallel.a2a_overlap = true; });
  // the moments' dtypes are the precision-aware optimizer's (as Megatron's)
  refused("--exp-avg-dtype", [](TrainOptions& o) { o.optim.exp_avg_dtype = MomentDtype::kBf16; });
  refused("--exp-avg-sq-dtype",
          [](TrainOptions& o) { o.optim.exp_avg_sq_dtype = MomentDtype::kBf16; });
  // the edges are accepted, and the defaults of --min-lr and --warmup filled in
  TrainOptions o;
  o.model_path = "x.json";
  o.optim.min_lr = o.optim.lr;
  o.optim.warmup = o.optim.steps;
  o.optim.weight_decay = o.optim.grad_clip = o.optim.mtp_lambda = o.optim.balance_alpha =
      o.optim.z_loss_coef = 0;
  EXPECT_EQ(test::error_of([&] { check_train_options(o); }), "");
  TrainOptions d;
  d.optim.steps = 1000;
  EXPECT_EQ(train_lr_schedule(d).min_lr, d.optim.lr / 10);
  EXPECT_EQ(train_lr_schedule(d).warmup, 100);
}

}  // namespace
}  // namespace moet

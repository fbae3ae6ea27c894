// The performance model against NVIDIA's published DeepSeek-V3 results (the blog "Setting a World
// Record for MoE Pre-Training on NVIDIA GB300 NVL72" and Megatron-Bridge's performance summary),
// its internal consistency, the catalog's sources, the planner, and one-line errors for layouts
// that do not divide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sim/cost_model.h"
#include "sim/planner.h"
#include "sim/published_rows.h"
#include "sim/report.h"
#include "sim/routing_fanout.h"
#include "sim/step_model.h"
#include "sim/step_timeline.h"

using namespace moet;
using namespace moet::sim;

namespace {

ModelConfig dsv3() { return load_model_config(MOET_SOURCE_DIR "/configs/deepseek-v3-671b.json"); }

// The published GB300 record layout (NVIDIA's GB300 NVL72 record): MXFP8, MTP 1, TP1 PP2 VPP8 EP32,
// MBS 1, GBS 4096, seq 4096, no recompute.
SimLayout gb300_record(int64_t gpus = 256) {
  SimLayout l;
  l.gpus = gpus, l.tp = 1, l.pp = 2, l.vpp = 8, l.ep = 32, l.mbs = 1, l.gbs = 4096, l.seq = 4096;
  l.precision = Recipe::MXFP8, l.mtp = 1;
  l.pp_layout = "Et*4|(t*4|)*14tmL";  // Megatron-Bridge's GB300 recipe
  return l;
}

// The published H100 row (Megatron-Bridge 25.09): FP8 blockwise, MTP 1, TP2 PP8 VPP4 EP64, MBS 1,
// GBS 8192; its recipe (Megatron-Bridge r0.1.0) ran DeepEP with the all-to-all overlap, no CUDA
// graphs, and recomputed mla_up_proj and mlp.
SimLayout h100_record() {
  for (const PublishedRow& r : published_rows())
    if (r.id == "D34") return r.layout;
  ADD_FAILURE() << "no H100 row";
  return {};
}

std::string error_of(const ModelConfig& c, const SimLayout& l) {
  try {
    validate(c, l);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Simulator, Gb300RecordWithinTenPercentOfPublished) {
  const Prediction p = simulate(dsv3(), gb300_record(), load_system("gb300-nvl72"));
  EXPECT_NEAR(p.flops_per_token / 1e9, 260.0, 0.05);
  EXPECT_NEAR(p.tflops_per_gpu, 1648, 0.10 * 1648) << "predicted " << p.tflops_per_gpu;
  EXPECT_NEAR(p.tokens_per_s_per_gpu, 6338, 0.10 * 6338);
  EXPECT_TRUE(p.fits) << p.memory_gb_per_gpu << " GB";  // the record ran without recompute
}

TEST(Simulator, H100RecordWithinTwelvePercentOfPublished) {
  const Prediction p = simulate(dsv3(), h100_record(), load_system("h100-sxm"));
  EXPECT_NEAR(p.tflops_per_gpu, 338, 0.12 * 338) << "predicted " << p.tflops_per_gpu;
  EXPECT_TRUE(p.fits) << p.memory_gb_per_gpu << " GB";
  // EP64 spans 8 nodes: the exchange crosses InfiniBand, and the overlap hides most of it
  EXPECT_GT(p.a2a_gb_scaleout, 0);
  EXPECT_LT(p.breakdown.a2a_exposed, 0.5 * p.breakdown.a2a_total);
  EXPECT_GT(p.breakdown.launch, 0);  // no CUDA graphs: host-launched
}

// The planner says which layouts moet train runs: the GB300 record's (TP1 EP32) yes, the H100
// recipe's TP2 and an ETP layout not yet.
TEST(Simulator, PlannerSaysWhatMoetTrainLacks) {
  SimLayout l;
  l.gpus = 256, l.pp = 2, l.vpp = 8, l.ep = 32, l.gbs = 4096;
  EXPECT_EQ(engine_lacks(l), "");
  l.tp = 2;
  EXPECT_EQ(engine_lacks(l), "--tp 2");
  l.etp = 2;
  EXPECT_EQ(engine_lacks(l), "--tp 2 --etp 2");
  l.tp = 1;
  EXPECT_EQ(engine_lacks(l), "--etp 2");
}

// Context parallelism on the H100 recipe at 32K tokens (DeepSeek-V3's first long-context phase):
// CP 2 over twice the GPUs keeps the data-parallel size; each rank holds half the sequence, so
// about half the activations and half the attention work, and pays the KV-latent exchange.
TEST(Simulator, ContextParallelHalvesActivationsAndAttention) {
  SimLayout one = h100_record();
  one.seq = 32768, one.gbs = 256;
  SimLayout two = one;
  two.cp = 2, two.gpus = 2 * one.gpus;
  ASSERT_EQ(two.dp(), one.dp());
  const SystemSpec s = load_system("h100-sxm");
  const Prediction p1 = simulate(dsv3(), one, s), p2 = simulate(dsv3(), two, s);
  EXPECT_EQ(p1.breakdown.cp_comm, 0);
  EXPECT_GT(p2.breakdown.cp_comm, 0);
  EXPECT_NEAR(p2.memory.activations / p1.memory.activations, 0.5, 0.1)
      << p2.memory.activations << " vs " << p1.memory.activations << " GB";
  EXPECT_NEAR(p2.breakdown.attention / p1.breakdown.attention, 0.5, 0.01);
  EXPECT_LT(p2.step_time_s, p1.step_time_s);  // half the work per rank, minus the exchange
  EXPECT_NE(describe(two).find("TP2 CP2 PP8"), std::string::npos) << describe(two);
  EXPECT_EQ(engine_lacks(two), "--tp 2 --cp 2");
  two.seq = 32766;  // not a multiple of 2·CP = 4
  try {
    validate(dsv3(), two);
    FAIL() << "an odd split accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not split into the 2·CP = 4"), std::string::npos)
        << e.what();
  }
}

TEST(Simulator, Gb300ScalingTo1024KeepsPublishedEfficiency) {
  // The recipes' large-batch variant (GBS 15360, row D6) at 256 and 1,024 GPUs: within a point
  // of the published 98.5% (the blog does not state the batch of its scaling run).
  SimLayout l = gb300_record();
  l.gbs = 15360;
  const auto big = simulate_scaling(dsv3(), l, load_system("gb300-nvl72"), {256, 1024});
  ASSERT_EQ(big.size(), 2u);
  EXPECT_DOUBLE_EQ(big[0].efficiency, 1.0);
  EXPECT_NEAR(100 * big[1].efficiency, 98.5, 1.0) << "predicted " << 100 * big[1].efficiency;
  // At GBS 4096 a rank runs 8 micro-batches instead of 32: the fill and drain passes, which
  // combined 1F1B cannot pair (Megatron runs them alone), expose their exchange, and the bubble
  // is a larger share.
  const auto ps = simulate_scaling(dsv3(), gb300_record(), load_system("gb300-nvl72"), {256, 1024});
  EXPECT_EQ(ps[0].micro_batches, 32);
  EXPECT_EQ(ps[1].micro_batches, 8);
  EXPECT_LT(ps[1].efficiency, big[1].efficiency - 0.03);
  EXPECT_GT(ps[1].breakdown.a2a_exposed / ps[1].breakdown.a2a_total,
            2 * ps[0].breakdown.a2a_exposed / ps[0].breakdown.a2a_total);
  EXPECT_GT(ps[1].breakdown.pp_bubble / ps[1].step_time_s,
            ps[0].breakdown.pp_bubble / ps[0].step_time_s);
}

// Host launches: nothing under full CUDA graphs; the MoE segments' kernels under partial; every
// kernel under none. Fewer graphs never make a step faster.
TEST(Simulator, FewerCudaGraphsNeverFaster) {
  for (const PublishedRow& r : published_rows()) {
    SimLayout l = r.layout;
    const SystemSpec s = load_system(r.system);
    l.cuda_graphs = "full";
    const Prediction full = simulate(dsv3(), l, s);
    l.cuda_graphs = "partial";
    const Prediction partial = simulate(dsv3(), l, s);
    l.cuda_graphs = "none";
    const Prediction none = simulate(dsv3(), l, s);
    EXPECT_EQ(full.breakdown.launch, 0) << r.id;
    EXPECT_GT(partial.breakdown.launch, 0) << r.id;
    EXPECT_LT(partial.tflops_per_gpu, full.tflops_per_gpu) << r.id;
    EXPECT_LE(none.tflops_per_gpu, partial.tflops_per_gpu) << r.id;
  }
  SimLayout bad = gb300_record();
  bad.cuda_graphs = "some";
  try {
    simulate(dsv3(), bad, load_system("gb300-nvl72"));
    ADD_FAILURE() << "--cuda-graphs some accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cuda-graphs 'some' is not one of"), std::string::npos);
  }
}

TEST(Simulator, BreakdownAddsUpToTheStep) {
  for (const SimLayout& l : {gb300_record(), h100_record()}) {
    const Prediction p = simulate(
        dsv3(), l, load_system(l.precision == Recipe::FP8Blockwise ? "h100-sxm" : "gb300-nvl72"));
    const Breakdown& b = p.breakdown;
    EXPECT_NEAR(b.compute + b.a2a_exposed + b.pp_bubble + b.dp_exposed + b.optimizer, p.step_time_s,
                1e-9 * p.step_time_s);
    EXPECT_NEAR(
        b.gemm + b.attention + b.memory_bound + b.tp_comm + b.cp_comm + b.launch + b.contention,
        b.compute, 1e-9 * b.compute);
    EXPECT_LE(b.a2a_exposed, b.a2a_total * (1 + 1e-9));
    EXPECT_LE(b.dp_exposed, b.dp_total * 1.2);
    const double tokens = double(l.gbs * l.seq);
    EXPECT_NEAR(p.tflops_per_gpu, p.flops_per_token * tokens / p.step_time_s / l.gpus / 1e12,
                1e-9 * p.tflops_per_gpu);
  }
}

TEST(Simulator, ChoicesMoveThePredictionTheRightWay) {
  const ModelConfig c = dsv3();
  const SystemSpec s = load_system("gb300-nvl72");
  const Prediction base = simulate(c, gb300_record(), s);
  SimLayout l = gb300_record();
  l.a2a_overlap = false;
  const Prediction no_overlap = simulate(c, l, s);
  EXPECT_GT(no_overlap.breakdown.a2a_exposed, 10 * base.breakdown.a2a_exposed);
  EXPECT_LT(no_overlap.tflops_per_gpu, base.tflops_per_gpu);
  l = gb300_record();
  l.recompute = "full";
  const Prediction full = simulate(c, l, s);
  EXPECT_LT(full.memory.activations, 0.2 * base.memory.activations);
  EXPECT_GT(full.breakdown.recompute, 0.2 * base.breakdown.compute);
  EXPECT_LT(full.tflops_per_gpu, base.tflops_per_gpu);
  l = gb300_record();
  l.recompute = "selective";
  const Prediction sel = simulate(c, l, s);
  EXPECT_LT(sel.memory.activations, base.memory.activations);
  EXPECT_GT(sel.memory.activations, full.memory.activations);
  EXPECT_LT(sel.tflops_per_gpu, base.tflops_per_gpu);
  EXPECT_GT(sel.tflops_per_gpu, full.tflops_per_gpu);
  // every module of moet train's --recompute-modules, alone: less memory, its work done again
  for (const auto& [name, m] : recompute_module_choices()) {
    l = gb300_record();
    l.recompute = "selective";
    l.recompute_modules = RecomputeModules{};
    l.recompute_modules.add(m);
    const Prediction p = simulate(c, l, s);
    EXPECT_LT(p.memory.activations, base.memory.activations) << name;
    // (the three dense layers sit on the first stage, which does not set the step's pace)
    if (m != RecomputeModule::kMlp) {
      EXPECT_GT(p.breakdown.recompute, 0) << name;
    }
  }
  l = gb300_record();
  l.precision = Recipe::BF16;
  EXPECT_LT(simulate(c, l, s).tflops_per_gpu, base.tflops_per_gpu);
  l = gb300_record();
  l.distributed_optimizer = false;
  EXPECT_GT(simulate(c, l, s).memory.optimizer, 5 * base.memory.optimizer);  // DP 128, EDP 4
  // The same layout on GB200 (4x less HBM headroom, half the NIC) is slower per GPU.
  EXPECT_LT(simulate(c, gb300_record(), load_system("gb200-nvl72")).tflops_per_gpu,
            base.tflops_per_gpu * 1.0001);
}

TEST(Simulator, FitsOnlyWhatTheMemoryHolds) {
  const ModelConfig c = dsv3();
  SimLayout l = gb300_record();
  l.pp = 1, l.vpp = 1, l.ep = 8,
  l.pp_layout = "";  // 671B with only 8-way expert sharding: ~200 GB of experts
  const Prediction p = simulate(c, l, load_system("gb300-nvl72"));
  EXPECT_FALSE(p.fits);
  EXPECT_GT(p.memory_gb_per_gpu, 288);
}

TEST(Simulator, GemmEfficiencyReproducesTheDeepGemmTable) {
  // DeepGEMM H800 FP8 after PR #74 (configs/systems/h100-sxm.json sources): TFLOP/s per shape.
  const SystemSpec s = load_system("h100-sxm");
  struct Point {
    double m, n, k, tflops;
  };
  for (const Point& p : {Point{4096, 7168, 16384, 1470}, Point{4096, 7168, 2048, 1204},
                         Point{4096, 24576, 1536, 1166}, Point{8192, 4096, 7168, 1381},
                         Point{8192, 7168, 2048, 1262}}) {
    const double predicted =
        s.peak(ops::Format::FP8Block) * gemm_efficiency(s, ops::Format::FP8Block, p.m, p.n, p.k);
    EXPECT_NEAR(predicted, p.tflops, 0.05 * p.tflops) << p.m << "x" << p.n << "x" << p.k;
  }
}

TEST(Simulator, PipelineLayoutsReadAndWriteMegatronSyntax) {
  const ModelConfig c = dsv3();
  SimLayout l = gb300_record();
  const auto stages = stages_of_slots(c, l);
  ASSERT_EQ(stages.size(), 64u);  // E, 61 t, m, L
  EXPECT_EQ(stages[0], 0u);       // E
  EXPECT_EQ(stages[4], 0u);       // t3
  EXPECT_EQ(stages[5], 1u);       // t4
  EXPECT_EQ(stages[61], 15u);     // t60
  EXPECT_EQ(stages[63], 15u);     // L
  EXPECT_EQ(format_pp_layout(c, l, stages), l.pp_layout);
  l.pp_layout = "";  // Megatron's even split: 4 slots per stage
  EXPECT_EQ(format_pp_layout(c, l, stages_of_slots(c, l)), "Et*3|(t*4|)*14t*2mL");
  l = h100_record();
  l.pp_layout = "";
  EXPECT_EQ(format_pp_layout(c, l, stages_of_slots(c, l)), "Et|(t*2|)*30mL");  // the recipe's
  EXPECT_EQ(format_pp_layout(c, h100_record(), stages_of_slots(c, h100_record())),
            "Et|(t*2|)*30mL");
  // The balanced layout of the record gives the stage with MTP and loss fewer layers.
  l = gb300_record();
  l.pp_layout = "balanced";
  const Prediction balanced = simulate(c, l, load_system("gb300-nvl72"));
  l.pp_layout = "";
  const Prediction even = simulate(c, l, load_system("gb300-nvl72"));
  EXPECT_GT(balanced.tflops_per_gpu, even.tflops_per_gpu);
  EXPECT_NE(balanced.pp_layout.find("mL"), std::string::npos);
}

TEST(Simulator, FanoutFollowsGroupLimitedRouting) {
  const ModelConfig c = dsv3();
  EXPECT_EQ(routing_fanout(c, 1, 1).ranks_same_domain, 0);
  // H100: EP64 over 8 nodes of 8; n_group 8 = nodes, topk_group 4: at most 4 nodes per token.
  const Fanout h = routing_fanout(c, 64, 8);
  EXPECT_LE(h.other_domains, 4.0);
  EXPECT_GT(h.other_domains, 2.5);
  EXPECT_LE(h.ranks_same_domain + h.ranks_other_domains, 8.0);
  EXPECT_GE(h.ranks_other_domains, h.other_domains);
  // GB300: EP32 inside one NVLink domain: nothing crosses domains.
  const Fanout g = routing_fanout(c, 32, 32);
  EXPECT_EQ(g.other_domains, 0);
  EXPECT_GT(g.ranks_same_domain, 4.0);
  EXPECT_LT(g.ranks_same_domain, 8.0);
}

TEST(Simulator, CatalogHasTheSystemsAndASourceForEveryNumber) {
  for (const char* name : {"h100-sxm", "h800", "h200", "b200", "gb200-nvl72", "gb300-nvl72"}) {
    const SystemSpec s = load_system(name);
    EXPECT_EQ(s.name, name);
    std::vector<std::string> keys = {"peak_tflops",
                                     "hbm_gb",
                                     "hbm_tbps",
                                     "nvlink_gbps",
                                     "nvlink_domain",
                                     "scaleout_gbps",
                                     "attention_fwd",
                                     "attention_bwd",
                                     "hbm",
                                     "a2a_nvlink",
                                     "a2a_scaleout",
                                     "a2a_sm_fraction",
                                     "collective_nvlink",
                                     "collective_scaleout",
                                     "collective_sm_fraction",
                                     "op_overhead_us",
                                     "memory_reserve_gb"};
    for (auto& [p, v] : s.peak_tflops) {
      keys.push_back("gemm_max." + p);
      keys.push_back("gemm_half_dim." + p);
    }
    for (const std::string& k : keys)
      EXPECT_FALSE(s.sources.count(k) == 0 || s.sources.at(k).empty()) << name << ": " << k;
    // Round trip through the writer.
    const SystemSpec back = parse_system(system_to_json(s), name);
    EXPECT_EQ(back.peak_tflops, s.peak_tflops);
    EXPECT_EQ(back.eff.gemm_half_dim, s.eff.gemm_half_dim);
    EXPECT_EQ(back.nvlink_domain, s.nvlink_domain);
  }
}

// A shared machine (`local`): a rank that runs one thread (ranks >= the calibration's threads)
// takes the GEMM curve measured on one thread; a rank with several threads, the machine's.
TEST(Simulator, SharedMachineRanksOfOneThreadTakeTheOneThreadCurve) {
  SystemSpec s = load_system("h100-sxm");
  const double d = s.gemm_half_dim(ops::Format::BF16);
  EXPECT_EQ(s.gemm_half_dim(ops::Format::BF16, 8), d);  // a GPU system: one curve
  s.compute_shared = true, s.threads = 2;
  s.eff.gemm_half_dim_one_thread["bf16"] = d / 8;
  EXPECT_EQ(s.gemm_half_dim(ops::Format::BF16, 1), d);
  EXPECT_EQ(s.gemm_half_dim(ops::Format::BF16, 2), d / 8);
  EXPECT_EQ(s.gemm_half_dim(ops::Format::BF16, 3), d / 8);
  EXPECT_EQ(s.gemm_half_dim(ops::Format::FP8Block, 2),
            s.gemm_half_dim(ops::Format::FP8Block));  // not measured
  EXPECT_GT(gemm_efficiency(s, ops::Format::BF16, 256, 256, 256, 2),
            gemm_efficiency(s, ops::Format::BF16, 256, 256, 256, 1));
  // the writer keeps both; a file without them (every catalog system) reads as before
  const SystemSpec back = parse_system(system_to_json(s), "local.json");
  EXPECT_EQ(back.threads, 2);
  EXPECT_EQ(back.eff.gemm_half_dim_one_thread, s.eff.gemm_half_dim_one_thread);
  EXPECT_EQ(load_system("b200").threads, 0);
  // through the model: two one-thread ranks' pipeline runs faster than on the machine's curve
  SimLayout l;
  l.gpus = 2, l.pp = 2, l.mbs = 1, l.gbs = 8, l.seq = 4096, l.precision = Recipe::BF16;
  l.cuda_graphs = "full";
  SystemSpec machine_curve = s;
  machine_curve.eff.gemm_half_dim_one_thread.clear();
  EXPECT_LT(simulate(dsv3(), l, s).step_time_s, simulate(dsv3(), l, machine_curve).step_time_s);
}

// NVL72's all-to-all as HybridEP measured it per EP size: the table's values at its sizes,
// log2-interpolated between them, the measured slope past the largest (EP 64 in the GB200
// recipes), and the largest's time per byte in the model longer than EP 32's.
TEST(Simulator, AllToAllFollowsTheMeasuredEpSizes) {
  const SystemSpec s = load_system("gb200-nvl72");
  const A2aByPeers& t = s.eff.a2a_nvlink_by_peers;
  ASSERT_EQ(t.peers.size(), 5u);
  for (size_t i = 0; i < t.peers.size(); ++i) {
    const A2aEfficiency e = s.a2a_nvlink_at(t.peers[i]);
    EXPECT_DOUBLE_EQ(e.dispatch_fp8, t.dispatch_fp8[i]);
    EXPECT_DOUBLE_EQ(e.dispatch_bf16, t.dispatch_bf16[i]);
    EXPECT_DOUBLE_EQ(e.combine, t.combine[i]);
  }
  // 539 GB/s at EP 32 and 489 at EP 36 (FP8 dispatch): halfway in log2 between them
  const double mid = std::sqrt(32.0 * 36.0);
  EXPECT_NEAR(s.a2a_nvlink_at(mid).dispatch_fp8, (0.599 + 0.544) / 2, 1e-9);
  EXPECT_DOUBLE_EQ(s.a2a_nvlink_at(4).combine, t.combine.front());
  const A2aEfficiency ep64 = s.a2a_nvlink_at(64);
  EXPECT_LT(ep64.dispatch_fp8, t.dispatch_fp8.back());
  EXPECT_GT(ep64.dispatch_fp8, 0.5 * t.dispatch_fp8.back());
  EXPECT_NEAR(ep64.combine, 0.60, 0.01);
  // without a table, the one fraction at every size
  const SystemSpec h = load_system("h100-sxm");
  EXPECT_DOUBLE_EQ(h.a2a_nvlink_at(8).dispatch_fp8, h.eff.a2a_nvlink);
  // through the model: time per NVLink byte at EP 64 above EP 32's
  SimLayout l = gb300_record();
  l.pp = 4, l.vpp = 4, l.a2a_overlap = false;
  auto per_byte = [&](int64_t ep) {
    l.ep = ep;
    const Prediction p = simulate(dsv3(), l, s);
    return p.breakdown.a2a_total / p.a2a_gb_nvlink;
  };
  EXPECT_GT(per_byte(64), 1.1 * per_byte(32));
  // the writer keeps the table; a bad one is one line
  const SystemSpec back = parse_system(system_to_json(s), "gb200");
  EXPECT_EQ(back.eff.a2a_nvlink_by_peers.combine, t.combine);
  std::string text = system_to_json(s);
  const std::string from = "\"peers\": [\n", to = "\"peers\": [\n        64,\n";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), to);
  try {
    parse_system(text, "bad.json");
    ADD_FAILURE() << "accepted columns of different lengths";
  } catch (const moet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("differ in length"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

TEST(Simulator, JsonHasExactlyTheKeys) {
  const auto ps = simulate_scaling(dsv3(), gb300_record(), load_system("gb300-nvl72"), {256, 512});
  for (bool several : {false, true}) {
    const auto j = nlohmann::json::parse(predictions_json(ps, several));
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 2u);
    for (const auto& o : j) {
      std::vector<std::string> keys;
      for (auto& [k, v] : o.items()) keys.push_back(k);
      std::vector<std::string> want = {
          "breakdown", "fits",        "memory_gb",      "memory_gb_per_gpu",
          "mfu",       "step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu"};
      if (several) want.push_back("efficiency");
      std::sort(keys.begin(), keys.end());
      std::sort(want.begin(), want.end());
      EXPECT_EQ(keys, want);
      for (const char* b : {"compute", "a2a_exposed", "pp_bubble", "dp_exposed", "optimizer"})
        EXPECT_TRUE(o["breakdown"].contains(b)) << b;
      double parts = 0;
      for (const char* m : {"weights", "gradients", "optimizer", "activations", "reserve"})
        parts += o["memory_gb"][m].get<double>();
      EXPECT_NEAR(parts, o["memory_gb_per_gpu"].get<double>(), 1e-9);
    }
  }
}

TEST(Simulator, LayoutsThatDoNotDivideSayWhat) {
  const ModelConfig c = dsv3();
  SimLayout l = gb300_record();
  l.ep = 48;
  EXPECT_NE(error_of(c, l).find("EP 48 does not divide the 256 routed experts"), std::string::npos)
      << error_of(c, l);
  l = gb300_record();
  l.vpp = 3, l.pp_layout = "";
  EXPECT_NE(error_of(c, l).find("virtual stages do not divide the 64 pipeline slots"),
            std::string::npos)
      << error_of(c, l);
  l.pp_layout = "Et*4|(t*4|)*14tmL";  // 16 stages, not 6
  EXPECT_NE(error_of(c, l).find("has 16 stages; PP×VPP = 6"), std::string::npos) << error_of(c, l);
  l.vpp = 8, l.pp_layout = "Et*4|(t*4|)*14mL";  // a layer short
  EXPECT_NE(error_of(c, l).find("has 1 E, 60 t, 1 m, 1 L; the model needs E, 61 t, 1 m, L"),
            std::string::npos)
      << error_of(c, l);
  l.pp_layout = "Et*4|(t*4|*14tmL";
  EXPECT_NE(error_of(c, l).find("missing ')'"), std::string::npos) << error_of(c, l);
  l = gb300_record();
  l.gpus = 255;
  EXPECT_NE(error_of(c, l).find("--gpus 255 does not divide by TP×PP"), std::string::npos)
      << error_of(c, l);
  l = gb300_record();
  l.gbs = 4000;
  EXPECT_NE(error_of(c, l).find("--gbs 4000 does not divide by MBS×DP"), std::string::npos)
      << error_of(c, l);
  l = gb300_record();
  l.ep = 256, l.gpus = 256;  // 128 GPUs per stage cannot hold 256 expert ranks
  EXPECT_NE(error_of(c, l).find("EP×ETP = 256 does not divide the 128 GPUs"), std::string::npos)
      << error_of(c, l);
  l = gb300_record();
  l.tp = 3, l.gpus = 384, l.gbs = 4096;
  EXPECT_NE(error_of(c, l).find("TP 3 does not divide"), std::string::npos) << error_of(c, l);
  for (const std::string& msg : {error_of(c, l)}) EXPECT_EQ(msg.find('\n'), std::string::npos);
  try {
    load_system("gb999");
    FAIL() << "unknown system accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown system 'gb999'"), std::string::npos) << m;
    EXPECT_NE(m.find("gb300-nvl72"), std::string::npos) << m;
  }
  l = gb300_record();
  l.precision = Recipe::MXFP8;
  EXPECT_THROW(simulate(c, l, load_system("h100-sxm")), Error);  // Hopper has no MXFP8
}

TEST(Simulator, PlannerRanksThePublishedGb300LayoutNearTheTop) {
  const ModelConfig c = dsv3();
  const SystemSpec s = load_system("gb300-nvl72");
  PlanRequest r;
  r.gpus = 256, r.gbs = 4096, r.seq = 4096, r.precision = Recipe::MXFP8, r.mtp = 1;
  const Plan plan = plan_layouts(c, s, r);
  ASSERT_GE(plan.ranked.size(), 5u);
  EXPECT_GT(plan.too_big, 0);
  for (size_t i = 1; i < plan.ranked.size(); ++i)
    ASSERT_GE(plan.ranked[i - 1].tflops_per_gpu, plan.ranked[i].tflops_per_gpu);
  const SimLayout pub = gb300_record();
  auto it = std::find_if(plan.ranked.begin(), plan.ranked.end(), [&](const Prediction& p) {
    const SimLayout& l = p.layout;
    return l.tp == pub.tp && l.pp == pub.pp && l.vpp == pub.vpp && l.ep == pub.ep &&
           l.mbs == pub.mbs && l.recompute == pub.recompute;
  });
  ASSERT_NE(it, plan.ranked.end()) << "published layout dropped";
  const size_t rank = size_t(it - plan.ranked.begin());
  // Not in the top 5, it must lie within the model's error band of #1 (docs/simulator.md).
  const ErrorBand band = error_band(check_published_rows(c), "full");
  EXPECT_TRUE(rank < 5 || plan.ranked.front().tflops_per_gpu <
                              (1 + std::max(-band.low, band.high)) * it->tflops_per_gpu)
      << "published layout #" << rank + 1 << " at " << it->tflops_per_gpu << " vs best "
      << plan.ranked.front().tflops_per_gpu;
  EXPECT_NE(explain_winner(plan).find(" beats "), std::string::npos);
}

TEST(Simulator, SpeaksTheTrainersRecipeNamesAndReadsFp8AsFp8Blockwise) {
  // "fp8", the simulator's former name of the FP8-blockwise recipe, reads as fp8-blockwise: on
  // the command line (sim_cli.sh checks the note on stderr) and in system files.
  EXPECT_EQ(precision_name("fp8"), "fp8-blockwise");
  for (const char* name : {"fp32", "bf16", "mxfp8", "fp8-blockwise", "fp4"})
    EXPECT_EQ(precision_name(name), name);
  SimLayout l = h100_record();
  l.precision = parse_recipe(precision_name("fp8"));
  const SystemSpec s = load_system("h100-sxm");
  const Prediction p = simulate(dsv3(), l, s);
  EXPECT_EQ(p.layout.precision, Recipe::FP8Blockwise);
  EXPECT_EQ(p.step_time_s, simulate(dsv3(), h100_record(), s).step_time_s);
  // A system file written with the former name gives the same system.
  nlohmann::json j = nlohmann::json::parse(system_to_json(s));
  for (nlohmann::json* m :
       {&j["peak_tflops"], &j["efficiency"]["gemm_max"], &j["efficiency"]["gemm_half_dim"]}) {
    (*m)["fp8"] = (*m)["fp8-blockwise"];
    m->erase("fp8-blockwise");
  }
  const SystemSpec former = parse_system(j.dump(), "former.json");
  EXPECT_EQ(former.peak_tflops, s.peak_tflops);
  EXPECT_EQ(former.eff.gemm_max, s.eff.gemm_max);
  EXPECT_EQ(former.eff.gemm_half_dim, s.eff.gemm_half_dim);
  // Inside the model, a recipe (the enum): only the trainer's names parse to one.
  try {
    parse_recipe("fp8");
    ADD_FAILURE() << "fp8 parsed as a recipe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--precision 'fp8' is not one of fp32, bf16, mxfp8, fp8-blockwise"),
              std::string::npos);
  }
}

// Every published DeepSeek-V3 row the catalog can simulate, with its recipe (docs/simulator.md's
// validation table). The one constant fitted to published throughput, framework_host_us, is
// refitted without each row it predicts (leave-one-out). Where the model stands, not yet the
// issue's ±10% floor for every row: the GB300 record's recipe within 3%, every host-launched row
// (partial or no CUDA graphs) within 11%; GB200's full-graph rows over by 16-19% (what the
// model lacks there: docs/simulator.md). The Kimi-K2 rows, a second model of the same
// architecture that the fit never sees, within 11% (under, as the EP64 host-launched DeepSeek-V3
// rows). Each row's FLOPs per token, published TFLOP/s over tokens/s, is the model's formula's:
// the row's MTP and the Kimi-K2 config are the ones that ran.
TEST(Simulator, PublishedRowsWithTheirRecipesLeaveOneOut) {
  const ModelConfig c = dsv3();
  const std::vector<RowCheck> checks = check_published_rows(c, /*leave_one_out=*/true);
  ASSERT_GE(checks.size(), 28u);
  const double fitted = fit_framework_host_us(c);
  EXPECT_NEAR(load_system("b200").eff.framework_host_us, fitted, 1.0) << "catalog out of date";
  int host = 0, kimi = 0;
  for (const RowCheck& k : checks) {
    EXPECT_NEAR(k.prediction.flops_per_token, k.row.tflops * 1e12 / k.row.tokens_per_s,
                0.005 * k.prediction.flops_per_token)
        << k.row.id;
    const bool launched = k.row.layout.cuda_graphs != "full";
    if (k.row.model == "kimi-k2") {
      ++kimi;
      EXPECT_EQ(k.framework_host_us, load_system(k.row.system).eff.framework_host_us);
      EXPECT_LT(k.error, 0) << k.row.id;
      EXPECT_GT(k.error, -0.11) << k.row.id << " " << k.prediction.tflops_per_gpu;
    } else if (launched) {
      ++host;
      EXPECT_LT(std::abs(k.error), 0.11) << k.row.id << " " << k.prediction.tflops_per_gpu;
    } else if (k.row.system == "gb300-nvl72") {
      EXPECT_LT(std::abs(k.error), 0.03) << k.row.id << " " << k.prediction.tflops_per_gpu;
    } else {
      EXPECT_GT(k.error, 0) << k.row.id;
      EXPECT_LT(k.error, 0.19) << k.row.id << " " << k.prediction.tflops_per_gpu;
    }
  }
  EXPECT_EQ(kimi, 4);
  EXPECT_EQ(host, 17);
  // the H100 row's prediction used the constant fitted without it
  const auto h100 = std::find_if(checks.begin(), checks.end(),
                                 [](const RowCheck& k) { return k.row.id == "D34"; });
  ASSERT_NE(h100, checks.end());
  EXPECT_EQ(h100->framework_host_us, fit_framework_host_us(c, "D34"));
  EXPECT_NE(h100->framework_host_us, fitted);
  const ErrorBand b = error_band(checks, "full");
  EXPECT_EQ(b.rows, 7);
  EXPECT_LT(b.low, 0);
  EXPECT_GT(b.high, 0);
}

// The timeline: a forward and a backward paired by combined 1F1B hide one's exchange under the
// other's compute, minus the SMs the exchange takes; alone, nothing hides it.
TEST(Simulator, TimelineHidesExchangeUnderThePairedPass) {
  PipelineScheduleSpec one;
  one.microbatches = 4;
  // forward: 1 s compute, 0.5 s exchange, 1 s compute; backward: 0.5 s exchange, 2 s compute
  const Chain f = {{false, 1}, {true, 0.5}, {false, 1}};
  const Chain b = {{true, 0.5}, {false, 2}};
  TimelineOptions alone;
  const StepTimeline serial = run_step_timeline(one, {f}, {b}, alone);
  EXPECT_NEAR(serial.step_s, 4 * 5.0, 1e-9);
  EXPECT_NEAR(serial.ranks[0].exposed, 4 * 1.0, 1e-9);
  EXPECT_NEAR(serial.ranks[0].compute, 4 * 4.0, 1e-9);
  TimelineOptions paired;
  paired.pair_passes = true;
  const StepTimeline t = run_step_timeline(one, {f}, {b}, paired);
  EXPECT_NEAR(t.ranks[0].compute, 16.0, 1e-9);
  // the first forward and the last backward run alone (their 1 s of exchange shows); the three
  // pairs hide theirs
  EXPECT_NEAR(t.ranks[0].exposed, 1.0, 1e-9);
  EXPECT_NEAR(t.step_s, 17.0, 1e-9);
  paired.sm_fraction = 0.2;
  const StepTimeline slowed = run_step_timeline(one, {f}, {b}, paired);
  // each pair's 1 s of exchange runs beside compute: 0.2 s more compute per pair
  EXPECT_NEAR(slowed.ranks[0].contention, 3 * 0.2, 1e-9);
  EXPECT_NEAR(slowed.step_s, 17.6, 1e-9);
  // an exchange longer than the compute beside it shows through
  const Chain fx = {{false, 1}, {true, 3}, {false, 1}};
  const StepTimeline longer = run_step_timeline(one, {fx}, {b}, paired);
  EXPECT_GT(longer.ranks[0].exposed, 3 * 0.5);
}

// moet's --a2a-overlap without a pipeline: two lanes of half a micro-batch side by side, one
// lane's exchange under the other's compute.
TEST(Simulator, TimelineRunsTwoLanesSideBySide) {
  PipelineScheduleSpec one;
  one.microbatches = 2;
  const Chain f = {{false, 1}, {true, 0.5}, {false, 1}};
  const Chain b = {{true, 0.5}, {false, 2}};
  TimelineOptions lanes;
  lanes.two_lanes = true;
  const StepTimeline t = run_step_timeline(one, {f}, {b}, lanes);
  EXPECT_NEAR(t.ranks[0].compute, 2 * 2 * 4.0, 1e-9);
  // forward: A computes 1, B computes 1 while A's 0.5 s exchange runs, A then B go on; only the
  // backward's first exchange (lane A's, nothing to compute beside it yet) shows
  EXPECT_NEAR(t.ranks[0].exposed, 2 * 0.5, 1e-9);
  EXPECT_NEAR(t.step_s, 2 * (8.0 + 0.5), 1e-9);
}

// Without exchanges the timeline is the engine's pipeline schedule.
TEST(Simulator, TimelineWithoutExchangeIsTheEnginesSchedule) {
  PipelineScheduleSpec s;
  s.stages = 4, s.chunks = 2, s.microbatches = 8;
  std::vector<Chain> f, b;
  std::vector<double> fs, bs;
  for (int k = 0; k < 8; ++k) {
    fs.push_back(1 + 0.1 * k), bs.push_back(2 + 0.05 * k);
    f.push_back({{false, fs.back()}}), b.push_back({{false, bs.back()}});
  }
  TimelineOptions o;
  o.p2p_s = 0.01;
  const StepTimeline t = run_step_timeline(s, f, b, o);
  EXPECT_NEAR(t.step_s, simulate_pipeline(s, fs, bs, 0.01).step_s, 1e-9);
  for (const RankTimeline& r : t.ranks) EXPECT_EQ(r.exposed, 0);
}

namespace moet::sim {
namespace {

// The zero-bubble and V schedules in the step model: the same lists the engine's schedule code
// gives (parallel/pipeline_schedule.h), each rank's chains placed as the schedule places stages.
TEST(Simulator, PipelineSchedulesMoveTheStepAsTheirDesignSays) {
  const ModelConfig c = dsv3();
  const SystemSpec s = load_system("gb300-nvl72");
  auto run = [&](PipelineScheduleKind k, int64_t vpp, bool overlap) {
    SimLayout l = gb300_record();
    l.schedule = k, l.vpp = vpp, l.a2a_overlap = overlap, l.pp_layout = "balanced";
    return simulate(c, l, s);
  };
  // Without the all-to-all overlap: ZB-H1's W fills 1F1B's bubble at the same memory bound.
  const Prediction one = run(PipelineScheduleKind::kInterleaved, 1, false);
  const Prediction zb = run(PipelineScheduleKind::kZB1P, 1, false);
  EXPECT_LT(zb.breakdown.pp_bubble, 0.7 * one.breakdown.pp_bubble);
  EXPECT_LT(zb.step_time_s, one.step_time_s);
  // ZB-V has no overlapped passes; DualPipeV's F&B pairs hide most of the exchange.
  const Prediction zbv = run(PipelineScheduleKind::kZBV, 2, true);
  const Prediction dpv = run(PipelineScheduleKind::kDualPipeV, 2, true);
  EXPECT_NEAR(zbv.breakdown.a2a_exposed, zbv.breakdown.a2a_total, 0.02 * zbv.breakdown.a2a_total);
  EXPECT_LT(dpv.breakdown.a2a_exposed, 0.4 * dpv.breakdown.a2a_total);
  EXPECT_LT(dpv.step_time_s, zbv.step_time_s);
  // The V holds 2P + 1 chunks of activations (DeepSeek's PP + 1): more than ZB-V's 2P.
  EXPECT_GT(dpv.memory.activations, zbv.memory.activations);
  // The layout line names the schedule; a V schedule with another VPP is refused in one line.
  EXPECT_NE(describe(dpv.layout).find("VPP2 dualpipev"), std::string::npos);
  SimLayout bad = gb300_record();
  bad.schedule = PipelineScheduleKind::kDualPipeV;
  EXPECT_NE(error_of(c, bad).find("--vpp must be 2 or left out"), std::string::npos);
}

// moet's I pass copies what its deferred W reads (model/weight_grads.h): each weight-gradient
// GEMM's input and output gradient, read and written once. A decoder layer's copy time is
// that traffic at the memory's speed, and the timeline puts it on every I pass — on the systems
// whose ranks run moet (the local machine); a GPU record's engine keeps the tensors alive
// instead (the test above: ZB-H1 still beats 1F1B on GB300).
TEST(Simulator, TheSplitBackwardPaysForItsCopies) {
  const ModelConfig c = dsv3();
  const SystemSpec s = load_system("gb300-nvl72");
  SimLayout l = gb300_record();
  for (const SlotCost& w : slot_costs(c, l, s))
    if (w.name.rfind("moe", 0) == 0 || w.name.rfind("dense", 0) == 0) {
      EXPECT_GT(w.wgrad_copy, 0) << w.name;
      EXPECT_LT(w.wgrad_copy, 0.5 * w.bwd()) << w.name;  // memory traffic, not the GEMMs
    }
  // On chains of one interval: the I pass gets the copy, the W pass does not.
  PipelineScheduleSpec spec;
  spec.kind = PipelineScheduleKind::kZB1P, spec.stages = 2, spec.microbatches = 4;
  const std::vector<Chain> f(2, Chain{{false, 1.0}}), b(2, Chain{{false, 2.0}});
  TimelineOptions o;
  const double plain = run_step_timeline(spec, f, b, o).step_s;
  o.input_copy_s = {0.25, 0.25};
  const StepTimeline t = run_step_timeline(spec, f, b, o);
  EXPECT_NEAR(t.ranks[0].compute, 4 * (1.0 + 2.0 + 0.25), 1e-9);
  EXPECT_GT(t.step_s, plain);
}

}  // namespace
}  // namespace moet::sim

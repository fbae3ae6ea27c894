// `moet simulate`, `moet plan`: argument parsing for the performance model (src/sim); the work is
// in the library. `moet bench` is in cli/bench_commands.h.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/recompute.h"

namespace moet::cli {

struct SimulateArgs {
  std::string model, system;
  std::vector<int64_t> gpus;
  int64_t tp = 1, cp = 1, pp = 1, vpp = 1, ep = 1, etp = 1, mbs = 1, gbs = 0, seq = 4096;
  std::optional<int64_t> mtp;  // unset: the model config's
  std::string precision = "bf16", recompute = "none", pp_layout, cuda_graphs = "full";
  std::string pipeline_schedule;  // empty: interleaved 1F1B (1F1B with --vpp 1)
  std::vector<RecomputeModule> recompute_modules;
  double expert_imbalance = 1.0;
  bool no_a2a_overlap = false, no_dp_overlap = false, no_distributed_optimizer = false;
  bool json = false;
  double tokens = 0;  // a token budget: time to train and GPU-hours
};

struct PlanArgs {
  std::string model, system, precision = "bf16";
  int64_t gpus = 0, gbs = 0, seq = 4096, top = 5;
  std::optional<int64_t> mtp;  // unset: the model config's
  double tokens = 0;
};

struct PublishedArgs {
  std::string model;
  bool fit = false;
};

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& a);
CLI::App* add_plan_command(CLI::App& app, PlanArgs& a);
void run_simulate(const SimulateArgs& a);
void run_plan(const PlanArgs& a);
CLI::App* add_published_command(CLI::App& app, PublishedArgs& a);
void run_published(const PublishedArgs& a);

}  // namespace moet::cli

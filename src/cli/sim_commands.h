// `moet simulate`, `moet plan`, `moet bench`: argument parsing for the performance model
// (src/sim); the work is in the library.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moet::cli {

struct SimulateArgs {
  std::string model, system;
  std::vector<int64_t> gpus;
  int64_t tp = 1, pp = 1, vpp = 1, ep = 1, etp = 1, mbs = 1, gbs = 0, seq = 4096;
  std::optional<int64_t> mtp;  // unset: the model config's
  std::string precision = "bf16", recompute = "none", pp_layout, cuda_graphs = "full";
  double expert_imbalance = 1.0;
  bool no_a2a_overlap = false, no_dp_overlap = false, no_distributed_optimizer = false;
  bool json = false;
};

struct PlanArgs {
  std::string model, system, precision = "bf16";
  int64_t gpus = 0, gbs = 0, seq = 4096, top = 5;
  std::optional<int64_t> mtp;  // unset: the model config's
};

struct BenchArgs {
  std::string out;  // default: configs/systems/local.json
  bool overwrite = false;
  int threads = 0;
  // --model: a per-op profile of a training step instead of the machine calibration
  std::string model, precision = "auto", json;
  int64_t bf16_layers = 1, micro_batch = 4, seq = 256, steps = 3, warmup = 2;
  // The emulated cluster (scripts/cluster.sh): ranks per node and the link between nodes,
  // GB/s each direction (0: one shared-memory domain).
  int ranks_per_node = 0;
  double link_gbps = 0;
};

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& a);
CLI::App* add_plan_command(CLI::App& app, PlanArgs& a);
CLI::App* add_bench_command(CLI::App& app, BenchArgs& a);
void run_simulate(const SimulateArgs& a);
void run_plan(const PlanArgs& a);
void run_bench(const BenchArgs& a);

}  // namespace moet::cli

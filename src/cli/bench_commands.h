// `moet bench`: argument parsing for measuring this machine (src/measure: the `local` system of
// moet simulate) or profiling a training step per op (src/train/op_profile.h); the work is in the
// library.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "train/train_options.h"

namespace moet::cli {

struct BenchArgs {
  std::string out;  // default: configs/systems/local.json
  bool overwrite = false;
  int threads = 0;
  // --model: a per-op profile of a training step instead of the machine calibration
  std::string model, json;
  PrecisionOptions precision;
  int64_t micro_batch = 4, seq = 256, steps = 3, warmup = 2;
  // The emulated cluster (scripts/cluster.sh): ranks per node and the link between nodes,
  // GB/s each direction (0: one shared-memory domain).
  int ranks_per_node = 0;
  double link_gbps = 0;
};

CLI::App* add_bench_command(CLI::App& app, BenchArgs& a);
void run_bench(const BenchArgs& a);

}  // namespace moet::cli

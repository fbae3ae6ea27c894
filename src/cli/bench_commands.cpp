#include "cli/bench_commands.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/choice_option.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "measure/calibrate_local.h"
#include "sim/system_spec.h"
#include "train/op_profile.h"

namespace moet::cli {

CLI::App* add_bench_command(CLI::App& app, BenchArgs& a) {
  CLI::App* c = app.add_subcommand(
      "bench",
      "measure this machine (GEMM shapes, attention, memory-bound ops, copies) and "
      "write the `local` system for moet simulate");
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_option("--out", a.out, "system file to write (default configs/systems/local.json)");
  c->add_flag("--overwrite", a.overwrite, "replace an existing calibration (--out) or --json file");
  c->add_option("--threads", a.threads, "threads (default: all cores)");
  c->add_option("--ranks-per-node", a.ranks_per_node,
                "describe the emulated cluster of scripts/cluster.sh: ranks per node (with "
                "--link-gbps)");
  c->add_option("--link-gbps", a.link_gbps,
                "the link between its nodes, GB/s each direction (its cap, or what "
                "bench/cluster_links.sh measured)");
  c->add_option("--model", a.model,
                "profile a training step of this model per op instead (time, share, GFLOP/s or "
                "GB/s of each op)");
  add_choice_option(c, "--precision", a.precision.recipe, precision_choices(),
                    "with --model: the recipe (as moet train takes it)");
  c->add_option("--bf16-layers", a.precision.bf16_layers,
                "with --model: the first (and last) bf16 layers of FP8 and FP4 recipes")
      ->capture_default_str();
  c->add_option("--bf16-layers-end", a.precision.bf16_layers_end,
                "with --model: the last bf16 layers of FP8 and FP4 recipes (default: as "
                "--bf16-layers)");
  c->add_option("--micro-batch", a.micro_batch, "with --model")->capture_default_str();
  c->add_option("--seq", a.seq, "with --model")->capture_default_str();
  c->add_option("--steps", a.steps, "with --model: profiled steps")->capture_default_str();
  c->add_option("--warmup", a.warmup, "with --model: untimed steps first")->capture_default_str();
  c->add_option("--json", a.json, "with --model: also write the profile as JSON to this file");
  return c;
}

void run_bench(const BenchArgs& a) {
  check_flag_threads(a.threads);
  check_flag_at_least("--ranks-per-node", a.ranks_per_node, 0);
  check_flag_at_least("--link-gbps", a.link_gbps, 0);
  if (!a.model.empty()) {
    check_flag_at_least("--bf16-layers", a.precision.bf16_layers, 0);
    if (a.precision.bf16_layers_end)
      check_flag_at_least("--bf16-layers-end", *a.precision.bf16_layers_end, 0);
    check_flag_positive("--micro-batch", a.micro_batch);
    check_flag_at_least("--seq", a.seq, 2);
    check_flag_positive("--steps", a.steps);
    check_flag_at_least("--warmup", a.warmup, 0);
    OpProfileOptions o;
    o.model_path = a.model, o.precision = a.precision;
    o.micro_batch = a.micro_batch, o.seq = a.seq, o.steps = a.steps, o.warmup = a.warmup;
    o.threads = a.threads;
    if (!a.json.empty() && std::filesystem::exists(a.json) && !a.overwrite)
      throw Error(str("--json ", a.json, " exists; pass --overwrite to replace it"));
    const OpProfile p = profile_training_step(o);
    std::fputs(op_profile_table(p).c_str(), stdout);
    if (!a.json.empty()) {
      std::ofstream f(a.json);
      if (!(f << op_profile_json(p))) throw Error(str("cannot write ", a.json));
    }
    return;
  }
  const std::string out = a.out.empty() ? sim::systems_dir() + "/local.json" : a.out;
  if (std::filesystem::exists(out) && !a.overwrite)
    throw Error(str(out, " exists (an earlier calibration); pass --overwrite to replace it"));
  if ((a.ranks_per_node > 0) != (a.link_gbps > 0))
    throw Error(
        "--ranks-per-node and --link-gbps describe the emulated cluster together: give "
        "both (positive) or neither");
  sim::SystemSpec s = calibrate_local(a.threads, stdout);
  if (a.ranks_per_node > 0) {
    s.name = "cluster";
    s.nvlink_domain = a.ranks_per_node;  // shared memory within a node
    s.scaleout_gbps = a.link_gbps;
    s.description += str("; emulated cluster: ", a.ranks_per_node, " ranks per node, links of ",
                         a.link_gbps, " GB/s each way");
    s.sources["scaleout_gbps"] = str("given with --link-gbps ", a.link_gbps,
                                     " (scripts/cluster.sh's tbf cap, or bench/cluster_links.sh)");
    s.sources["nvlink_domain"] = str("given with --ranks-per-node ", a.ranks_per_node);
  }
  std::ofstream f(out);
  if (!f) throw Error(str("cannot write ", out));
  f << sim::system_to_json(s);
  std::printf("wrote %s\n", out.c_str());
}

}  // namespace moet::cli

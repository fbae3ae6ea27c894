#include "cli/sim_commands.h"

#include <cstdio>

#include "cli/choice_option.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "core/warning.h"
#include "model/config.h"
#include "sim/report.h"

namespace moet::cli {

namespace {

// The numbers simulate and plan share (the layout's own checks follow in the library).
void check_model_options(int64_t seq, const std::optional<int64_t>& mtp) {
  check_flag_positive("--seq", seq);
  if (mtp) check_flag_at_least("--mtp", *mtp, 0);
}

void add_model_options(CLI::App* c, std::string& model, std::string& system, int64_t& seq,
                       std::string& precision, std::optional<int64_t>& mtp) {
  c->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  c->add_option("--model", model, "Hugging Face config.json of the model")->required();
  c->add_option("--system", system,
                "cluster from configs/systems (h100-sxm, h200, b200, gb200-nvl72, gb300-nvl72, "
                "local) or a path to a system .json")
      ->required();
  c->add_option("--seq", seq, "sequence length")->capture_default_str();
  c->add_option("--precision", precision,
                "fp32, bf16, mxfp8 or fp8-blockwise, as moet train names its recipes (fp8 is read "
                "as fp8-blockwise)")
      ->capture_default_str();
  c->add_option("--mtp", mtp, "multi-token-prediction depth (default: the model config's)");
}

// --precision in the simulator's names (sim::precision_name), noting a former name on stderr.
std::string precision_flag(const std::string& flag) {
  const std::string name = sim::precision_name(flag);
  if (name != flag) warn(str("--precision ", flag, " is read as ", name, " (the trainer's name)"));
  return name;
}

}  // namespace

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& a) {
  CLI::App* c = app.add_subcommand(
      "simulate", "predict step time, TFLOP/s, memory and scaling of a layout on a cluster");
  add_model_options(c, a.model, a.system, a.seq, a.precision, a.mtp);
  c->add_option("--gpus", a.gpus, "GPU count, or several (comma-separated) at the same GBS")
      ->required()
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  c->add_option("--tp", a.tp, "tensor parallel")->capture_default_str();
  c->add_option("--pp", a.pp, "pipeline parallel")->capture_default_str();
  c->add_option("--vpp", a.vpp, "virtual pipeline stages per rank")->capture_default_str();
  c->add_option("--ep", a.ep, "expert parallel")->capture_default_str();
  c->add_option("--etp", a.etp, "expert tensor parallel")->capture_default_str();
  c->add_option("--mbs", a.mbs, "micro-batch (sequences)")->capture_default_str();
  c->add_option("--gbs", a.gbs, "global batch (sequences)")->required();
  c->add_option("--recompute", a.recompute, "none, selective or full")->capture_default_str();
  add_choices_option(c, "--recompute-modules", a.recompute_modules, recompute_module_choices(),
                     "with --recompute selective: the modules, as moet train's (default core_attn; "
                     "the published DeepSeek-V3 recipes: mla_up_proj moe_act layernorm)");
  c->add_option("--pp-layout", a.pp_layout,
                "pipeline layout: Megatron syntax (e.g. 'Et*4|(t*4|)*14tmL'), 'balanced', or "
                "empty for Megatron's even split");
  c->add_option("--expert-imbalance", a.expert_imbalance,
                "expert rows of the busiest EP rank over the mean (moet train reports it as "
                "ep_load_imbalance; 1 = balanced)")
      ->capture_default_str();
  c->add_flag("--no-a2a-overlap", a.no_a2a_overlap, "expert all-to-all not hidden behind compute");
  c->add_option("--cuda-graphs", a.cuda_graphs,
                "kernels in CUDA graphs: full (launches free), partial (MoE dispatch, experts and "
                "combine launched one by one), none (every kernel launched by the host)")
      ->capture_default_str();
  c->add_flag("--no-dp-overlap", a.no_dp_overlap,
              "data-parallel gradient/parameter traffic not hidden behind compute");
  c->add_flag("--no-distributed-optimizer", a.no_distributed_optimizer,
              "optimizer state replicated on every data-parallel rank");
  c->add_flag("--json", a.json, "print a JSON array, one object per GPU count");
  return c;
}

CLI::App* add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* c = app.add_subcommand(
      "plan", "search TP/PP/VPP/EP/micro-batch/recompute layouts and rank them by throughput");
  add_model_options(c, a.model, a.system, a.seq, a.precision, a.mtp);
  c->add_option("--gpus", a.gpus, "GPUs")->required();
  c->add_option("--gbs", a.gbs, "global batch (sequences)")->required();
  c->add_option("--top", a.top, "layouts to print")->capture_default_str();
  return c;
}

void run_simulate(const SimulateArgs& a) {
  check_model_options(a.seq, a.mtp);
  for (int64_t g : a.gpus) check_flag_positive("--gpus", g);
  check_flag_at_least("--expert-imbalance", a.expert_imbalance, 1);
  const ModelConfig c = load_model_config(a.model);
  const sim::SystemSpec s = sim::load_system(a.system);
  sim::SimLayout l;
  l.tp = a.tp, l.pp = a.pp, l.vpp = a.vpp, l.ep = a.ep, l.etp = a.etp, l.mbs = a.mbs;
  l.gbs = a.gbs, l.seq = a.seq, l.precision = precision_flag(a.precision);
  l.mtp = a.mtp.value_or(-1);
  for (RecomputeModule m : a.recompute_modules) l.recompute_modules.add(m);
  l.recompute = a.recompute, l.a2a_overlap = !a.no_a2a_overlap, l.dp_overlap = !a.no_dp_overlap;
  l.distributed_optimizer = !a.no_distributed_optimizer;
  l.expert_imbalance = a.expert_imbalance;
  l.pp_layout = a.pp_layout;
  l.cuda_graphs = a.cuda_graphs;
  const auto ps = sim::simulate_scaling(c, l, s, a.gpus);
  if (a.json) {
    std::fprintf(stderr, "moet simulate: %s\n", sim::flops_line(ps.front()).c_str());
    std::fputs(sim::predictions_json(ps, a.gpus.size() > 1).c_str(), stdout);
  } else {
    sim::print_predictions(stdout, s, ps);
  }
}

void run_plan(const PlanArgs& a) {
  check_model_options(a.seq, a.mtp);
  check_flag_positive("--gpus", a.gpus);
  check_flag_positive("--gbs", a.gbs);
  check_flag_positive("--top", a.top);
  const ModelConfig c = load_model_config(a.model);
  const sim::SystemSpec s = sim::load_system(a.system);
  sim::PlanRequest r;
  r.gpus = a.gpus, r.gbs = a.gbs, r.seq = a.seq, r.precision = precision_flag(a.precision);
  r.mtp = a.mtp.value_or(-1);
  s.peak(r.precision);
  const sim::Plan plan = sim::plan_layouts(c, s, r);
  sim::print_plan(stdout, s, plan, size_t(a.top));
  if (plan.ranked.empty()) throw Error("no layout divides the model and fits in memory");
}

}  // namespace moet::cli

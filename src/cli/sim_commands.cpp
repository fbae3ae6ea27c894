#include "cli/sim_commands.h"

#include <cstdio>
#include <optional>

#include "cli/choice_option.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "core/warning.h"
#include "model/config.h"
#include "model/recipe.h"
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
                "a recipe as moet train names it (fp8 is read as fp8-blockwise); the system must "
                "give its GEMM peak (FP4: B200, GB200 and GB300)")
      ->capture_default_str();
  c->add_option("--mtp", mtp, "multi-token-prediction depth (default: the model config's)");
}

// --precision's recipe, by the trainer's names or a former name of the simulator's
// (sim::precision_name, noted on stderr).
Recipe precision_flag(const std::string& flag) {
  const std::string name = sim::precision_name(flag);
  const Recipe r = parse_recipe(name);
  if (name != flag) warn(str("--precision ", flag, " is read as ", name, " (the trainer's name)"));
  return r;
}

// The published rows' error band for `model` ("deepseek-v3", "kimi-k2") with these CUDA graphs;
// outside full graphs each DeepSeek-V3 row predicted with the host constant refitted without it.
sim::ErrorBand published_band(const std::string& model, const std::string& cuda_graphs) {
  const ModelConfig dsv3 = sim::published_model_config("deepseek-v3");
  return sim::error_band(sim::check_published_rows(dsv3, cuda_graphs != "full"), cuda_graphs,
                         model);
}

// After the table: the error band the published rows support, what the prediction assumes,
// what a layout that does not fit would need, and a token budget's time.
void print_caveats(const ModelConfig& c, const sim::SystemSpec& s, const sim::SimLayout& l,
                   const std::vector<sim::Prediction>& ps, double tokens) {
  if (s.compute_shared)
    std::printf(
        "error band: moet's own runs on this machine, within 20%% "
        "(tests/sim_local_check.sh)\n");
  else if (const std::string model = sim::validated_model(c); !model.empty())
    std::printf("error band: %s\n",
                sim::band_line(published_band(model, l.cuda_graphs), l.cuda_graphs).c_str());
  else
    std::printf("error band: no published row validates this model\n");
  std::printf("assumes: %s\n", sim::assumptions_line(l).c_str());
  for (const sim::Prediction& p : ps) {
    if (p.fits) continue;
    std::printf("%lld GPUs: needs %.1f GB of %.0f;", static_cast<long long>(p.layout.gpus),
                p.memory_gb_per_gpu, s.hbm_gb / (s.compute_shared ? double(p.layout.gpus) : 1));
    for (const char* rc : {"selective", "full"}) {
      sim::SimLayout more = p.layout;
      if (more.recompute == "full" || (more.recompute == "selective" && rc[0] == 's')) continue;
      more.recompute = rc;
      if (rc[0] == 's') more.recompute_modules = moe_recipe_recompute_modules();
      const sim::Prediction q = sim::simulate(c, more, s);
      std::printf(" with --recompute %s%s: %.1f GB (%s, %.1f TFLOP/s/GPU);", rc,
                  rc[0] == 's' ? " --recompute-modules mla_up_proj moe_act layernorm" : "",
                  q.memory_gb_per_gpu, q.fits ? "fits" : "does not fit", q.tflops_per_gpu);
    }
    std::printf("\n");
  }
  if (tokens > 0)
    for (const sim::Prediction& p : ps) std::printf("%s\n", sim::tokens_line(p, tokens).c_str());
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
  c->add_option("--cp", a.cp,
                "context parallel: each sequence in 2·CP load-balanced chunks over CP ranks, MLA's "
                "KV latent all-gathered")
      ->capture_default_str();
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
  c->add_option("--pipeline-schedule", a.pipeline_schedule,
                "1f1b, interleaved (the default), zb1p, zbv or dualpipev (TorchTitan's names too); "
                "zbv and dualpipev put --vpp 2 chunks on each rank in a V");
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
  c->add_option("--tokens", a.tokens, "a token budget: print the days and GPU-hours to train it");
  return c;
}

CLI::App* add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* c = app.add_subcommand(
      "plan", "search TP/PP/VPP/EP/micro-batch/recompute layouts and rank them by throughput");
  add_model_options(c, a.model, a.system, a.seq, a.precision, a.mtp);
  c->add_option("--gpus", a.gpus, "GPUs")->required();
  c->add_option("--gbs", a.gbs, "global batch (sequences)")->required();
  c->add_option("--top", a.top, "layouts to print")->capture_default_str();
  c->add_option("--tokens", a.tokens, "a token budget: print the days and GPU-hours of #1");
  return c;
}

CLI::App* add_published_command(CLI::App& app, PublishedArgs& a) {
  CLI::App* c = app.add_subcommand(
      "published", "predict every published DeepSeek-V3 row with its recipe: the validation table");
  c->add_option("--model", a.model,
                "DeepSeek-V3's config.json (default: the repository's "
                "configs/deepseek-v3-671b.json, which the band of simulate and plan uses)");
  c->add_flag("--fit", a.fit,
              "print framework_host_us fitted to every row run outside full CUDA graphs (the "
              "catalog's value)");
  return c;
}

void run_published(const PublishedArgs& a) {
  const ModelConfig c =
      a.model.empty() ? sim::published_model_config("deepseek-v3") : load_model_config(a.model);
  if (sim::validated_model(c) != "deepseek-v3")
    throw Error(str(a.model, " is not DeepSeek-V3's shape: the published rows are DeepSeek-V3's ",
                    "(with Kimi-K2's, read from configs/kimi-k2.json)"));
  if (a.fit) {
    std::printf("framework_host_us %.1f\n", sim::fit_framework_host_us(c));
    return;
  }
  // each host-launched row predicted with the constant refitted without it
  sim::print_published(stdout, sim::check_published_rows(c, /*leave_one_out=*/true));
}

void run_simulate(const SimulateArgs& a) {
  check_model_options(a.seq, a.mtp);
  for (int64_t g : a.gpus) check_flag_positive("--gpus", g);
  check_flag_at_least("--expert-imbalance", a.expert_imbalance, 1);
  check_flag_at_least("--tokens", a.tokens, 0);
  const ModelConfig c = load_model_config(a.model);
  const sim::SystemSpec s = sim::load_system(a.system);
  sim::SimLayout l;
  l.tp = a.tp, l.cp = a.cp, l.pp = a.pp, l.vpp = a.vpp, l.ep = a.ep, l.etp = a.etp, l.mbs = a.mbs;
  l.gbs = a.gbs, l.seq = a.seq, l.precision = precision_flag(a.precision);
  l.mtp = a.mtp.value_or(-1);
  for (RecomputeModule m : a.recompute_modules) l.recompute_modules.add(m);
  l.recompute = a.recompute, l.a2a_overlap = !a.no_a2a_overlap, l.dp_overlap = !a.no_dp_overlap;
  l.distributed_optimizer = !a.no_distributed_optimizer;
  l.expert_imbalance = a.expert_imbalance;
  l.pp_layout = a.pp_layout;
  l.cuda_graphs = a.cuda_graphs;
  if (!a.pipeline_schedule.empty()) {
    l.schedule = parse_pipeline_schedule(a.pipeline_schedule);
    if (is_v_schedule(l.schedule) && a.vpp == 1) l.vpp = 2;  // the V's two chunks
  }
  const auto ps = sim::simulate_scaling(c, l, s, a.gpus);
  if (a.json) {
    std::fprintf(stderr, "moet simulate: %s\n", sim::flops_line(ps.front()).c_str());
    std::fputs(sim::predictions_json(ps, a.gpus.size() > 1).c_str(), stdout);
  } else {
    sim::print_predictions(stdout, s, ps);
    print_caveats(c, s, l, ps, a.tokens);
  }
}

void run_plan(const PlanArgs& a) {
  check_model_options(a.seq, a.mtp);
  check_flag_positive("--gpus", a.gpus);
  check_flag_positive("--gbs", a.gbs);
  check_flag_positive("--top", a.top);
  check_flag_at_least("--tokens", a.tokens, 0);
  const ModelConfig c = load_model_config(a.model);
  const sim::SystemSpec s = sim::load_system(a.system);
  sim::PlanRequest r;
  r.gpus = a.gpus, r.gbs = a.gbs, r.seq = a.seq, r.precision = precision_flag(a.precision);
  r.mtp = a.mtp.value_or(-1);
  s.peak(sim::gemm_format(r.precision));
  const sim::Plan plan = sim::plan_layouts(c, s, r);
  std::optional<sim::ErrorBand> band;
  if (const std::string model = sim::validated_model(c); !s.compute_shared && !model.empty())
    band = published_band(model, "full");
  sim::print_plan(stdout, s, plan, size_t(a.top), band ? &*band : nullptr);
  if (plan.ranked.empty()) throw Error("no layout divides the model and fits in memory");
  if (a.tokens > 0)
    std::printf("#1: %s\n", sim::tokens_line(plan.ranked.front(), a.tokens).c_str());
}

}  // namespace moet::cli

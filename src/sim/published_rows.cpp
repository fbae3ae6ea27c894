#include "sim/published_rows.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "model/config.h"
#include "sim/system_spec.h"

#ifndef MOET_SOURCE_DIR
#define MOET_SOURCE_DIR "."
#endif

namespace moet::sim {

namespace {

RecomputeModules modules(std::initializer_list<RecomputeModule> ms) {
  RecomputeModules r;
  for (RecomputeModule m : ms) r.add(m);
  return r;
}

// One of Megatron-Bridge's recipes: the layout and flags a published row ran.
struct BridgeRecipe {
  int64_t gpus, tp, pp, vpp, ep, mbs, gbs;
  Recipe precision;
  int64_t mtp;
  RecomputeModules recompute;  // empty: none
  bool a2a_overlap;
  const char* cuda_graphs;
  const char* pp_layout;
};

PublishedRow row(const char* id, const char* container, const char* system, const BridgeRecipe& r,
                 double tflops, double tokens_per_s, bool flags_known = true) {
  PublishedRow p;
  p.id = id, p.container = container, p.system = system, p.tflops = tflops;
  p.tokens_per_s = tokens_per_s;
  p.flags_known = flags_known;
  SimLayout& l = p.layout;
  l.gpus = r.gpus, l.tp = r.tp, l.pp = r.pp, l.vpp = r.vpp, l.ep = r.ep, l.mbs = r.mbs;
  l.gbs = r.gbs, l.seq = 4096, l.precision = r.precision, l.mtp = r.mtp;
  l.recompute = r.recompute.list().empty() ? "none" : "selective";
  l.recompute_modules = r.recompute;
  l.a2a_overlap = r.a2a_overlap, l.cuda_graphs = r.cuda_graphs, l.pp_layout = r.pp_layout;
  return p;
}

}  // namespace

// Megatron-Bridge docs/performance-summary.md and performance-summary-archive.md (the rows and
// their containers), and each release's scripts/performance/configs/deepseek presets and
// perf_recipes/deepseek (the flags). B300 rows are left out: the catalog has no B300.
const std::vector<PublishedRow>& published_rows() {
  using M = RecomputeModule;
  static const std::vector<PublishedRow> rows = [] {
    // Megatron-Bridge's default layout for (PP, VPP) = (2, 8), (4, 4), (8, 2) and (16, 1)
    // (set_deepseek_v3_pipeline_model_parallel_layout): the record's
    const char* kRecord = "Et*4|(t*4|)*14tmL";
    const RecomputeModules none, up = modules({M::kMlaUpProj}), mlp = modules({M::kMlp});
    const RecomputeModules up_mlp = modules({M::kMlaUpProj, M::kMlp});
    const RecomputeModules act = modules({M::kMoeAct});
    // the recipes' precision
    constexpr Recipe mx = Recipe::MXFP8, bf16 = Recipe::BF16, blockwise = Recipe::FP8Blockwise;
    // 26.06 on: full-iteration CUDA graphs, HybridEP, all-to-all overlap (+ delayed wgrad)
    const BridgeRecipe gb300_full{256, 1, 2, 8, 32, 1, 4096, mx, 1, none, true, "full", kRecord};
    const BridgeRecipe gb200_full{256, 1, 4, 4, 64, 1, 4096, mx, 1, up, true, "full", kRecord};
    // 26.02-26.04.01: no overlap; GB300 without CUDA graphs, GB200 with TE's partial scopes
    const BridgeRecipe gb300_mbs2{256, 1, 2, 8, 32, 2, 4096, mx, 1, up, false, "none", kRecord};
    const BridgeRecipe gb200_v2{256, 1, 4, 4, 64, 1, 4096, mx, 1, up, false, "partial", kRecord};
    BridgeRecipe gb200_v2_mlp = gb200_v2;
    gb200_v2_mlp.recompute = mlp;
    const BridgeRecipe b200_pp16{256, 1, 16, 1, 8, 1, 4096, mx, 1, up, false, "none", kRecord};
    const BridgeRecipe b200_pp8{256, 1, 8, 2, 32, 1, 4096, mx, 1, up_mlp, true, "partial", kRecord};
    BridgeRecipe gb300_gbs15360 = gb300_full;
    gb300_gbs15360.gbs = 15360;
    // 25.11, without MTP: the rows' own layouts; flags from the 25.11 presets (not published)
    // (without MTP the 63 slots divide no stage count: the rows' layouts are not published, so
    // balanced stages)
    const BridgeRecipe gb300_25{256,  1, 2,   4,     32,        1,         4096,
                                bf16, 0, act, false, "partial", "balanced"};
    BridgeRecipe gb300_25_mx = gb300_25;
    gb300_25_mx.precision = mx;
    const BridgeRecipe gb200_25{256,  1, 4,  4,     64,        1,         4096,
                                bf16, 0, up, false, "partial", "balanced"};
    const BridgeRecipe gb200_25_mx{256, 1, 8,  4,     32,        1,         4096,
                                   mx,  0, up, false, "partial", "balanced"};
    // 25.09 H100: DeepEP, A2A overlap, no CUDA graphs; 338 as the performance summary gives it
    const BridgeRecipe h100{
        1024, 2, 8, 4, 64, 1, 8192, blockwise, 1, up_mlp, true, "none", "Et|(tt|)*30mL"};
    // Kimi-K2 on GB300, 26.02.01-26.06 (one preset throughout: kimi_workload_base_configs.py,
    // recipes/kimi/kimi_k2.py): HybridEP, no overlap, no CUDA graphs, Muon, which needs the
    // optimizer unsharded; the (4, 4) layout of _get_kimi_k2_pipeline_layout
    const BridgeRecipe kimi{
        256, 1, 4, 4, 64, 2, 4096, mx, 0, up, false, "none", "Et*4|(t*4|)*14tL"};
    auto kimi_row = [&](const char* id, const char* container, double tflops, double tokens) {
      PublishedRow p = row(id, container, "gb300-nvl72", kimi, tflops, tokens);
      p.model = "kimi-k2";
      p.layout.distributed_optimizer = false;
      return p;
    };
    return std::vector<PublishedRow>{
        row("D1", "26.08", "gb300-nvl72", gb300_full, 1635, 6288),
        row("D2", "26.08", "gb200-nvl72", gb200_full, 1276, 4912),
        row("D3", "26.06.01", "gb300-nvl72", gb300_full, 1640, 6304),
        row("D4", "26.06.01", "gb200-nvl72", gb200_full, 1280, 4928),
        row("D5", "26.06", "gb300-nvl72", gb300_full, 1648, 6338),
        row("D6", "26.06", "gb300-nvl72", gb300_gbs15360, 1670, 6422),
        row("D7", "26.06", "gb200-nvl72", gb200_full, 1292, 4969),
        row("D9", "26.04.01", "gb300-nvl72", gb300_mbs2, 1298, 4992),
        row("D10", "26.04.01", "gb200-nvl72", gb200_v2_mlp, 1106, 4256),
        row("D12", "26.04.01", "b200", b200_pp8, 864, 3328),
        row("D13", "26.04", "gb300-nvl72", gb300_mbs2, 1290, 4965),
        row("D14", "26.04", "gb200-nvl72", gb200_v2_mlp, 1090, 4193),
        row("D16", "26.04", "b200", b200_pp16, 732, 2815),
        row("D17", "26.02.01", "gb300-nvl72", gb300_mbs2, 1219, 4691),
        row("D18", "26.02.01", "gb200-nvl72", gb200_v2, 1046, 4021),
        row("D20", "26.02.01", "b200", b200_pp16, 725, 2790),
        row("D21", "26.02", "gb300-nvl72", gb300_mbs2, 1199, 4612),
        row("D22", "26.02", "gb200-nvl72", gb200_v2, 1028, 3955),
        row("D24", "26.02", "b200", b200_pp16, 699, 2689),
        row("D25", "25.11", "gb300-nvl72", gb300_25, 961, 3848, false),
        row("D26", "25.11", "gb300-nvl72", gb300_25_mx, 1088, 4357, false),
        row("D27", "25.11", "gb200-nvl72", gb200_25, 782, 3139, false),
        row("D28", "25.11", "gb200-nvl72", gb200_25_mx, 1003, 4018, false),
        row("D34", "25.09", "h100-sxm", h100, 338, 1297),
        kimi_row("K1", "26.06", 1099, 5372),
        kimi_row("K2", "26.04.01", 1088, 5328),
        kimi_row("K3", "26.04", 1090, 5332),
        kimi_row("K4", "26.02.01", 1037, 5072),
    };
  }();
  return rows;
}

std::string validated_model(const ModelConfig& c) {
  if (c.hidden_size != 7168 || c.num_hidden_layers != 61 || c.num_experts_per_tok != 8) return "";
  if (c.n_routed_experts == 256) return "deepseek-v3";
  if (c.n_routed_experts == 384) return "kimi-k2";
  return "";
}

ModelConfig published_model_config(const std::string& model) {
  MOET_CHECK(model == "deepseek-v3" || model == "kimi-k2", "no published rows of model '", model,
             "'");
  return load_model_config(str(MOET_SOURCE_DIR, "/configs/",
                               model == "kimi-k2" ? "kimi-k2.json" : "deepseek-v3-671b.json"));
}

namespace {

const SystemSpec& system_of(const std::string& name) {
  static std::map<std::string, SystemSpec> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) it = loaded.emplace(name, load_system(name)).first;
  return it->second;
}

// The row's model: DeepSeek-V3 as the caller loaded it, or Kimi-K2 from configs/.
const ModelConfig& model_of(const ModelConfig& dsv3, const PublishedRow& r) {
  if (r.model == "deepseek-v3") return dsv3;
  static const ModelConfig kimi = published_model_config("kimi-k2");
  MOET_ASSERT(r.model == "kimi-k2");
  return kimi;
}

RowCheck check(const ModelConfig& dsv3, const PublishedRow& r, double framework_host_us) {
  SystemSpec s = system_of(r.system);
  s.eff.framework_host_us = framework_host_us;
  RowCheck k;
  k.row = r;
  k.prediction = simulate(model_of(dsv3, r), r.layout, s);
  k.error = k.prediction.tflops_per_gpu / r.tflops - 1;
  k.framework_host_us = framework_host_us;
  return k;
}

bool host_launched(const PublishedRow& r) { return r.layout.cuda_graphs != "full"; }

// The rows the host constant is fitted to (and refitted without, one at a time).
bool in_fit(const PublishedRow& r) { return host_launched(r) && r.model == "deepseek-v3"; }

}  // namespace

// Each host-launched row's prediction as a function of framework_host_us, simulated on a grid
// and interpolated linearly between its points: the fits below search these curves, so a
// leave-one-out table costs one grid of simulations, not one per row and search step. The row's
// own prediction is then simulated at the fitted value.
namespace {

constexpr double kHostGridStep = 10, kHostGridMax = 500;  // µs

struct HostCurve {
  const PublishedRow* row = nullptr;
  std::vector<double> tflops;  // at 0, kHostGridStep, ... kHostGridMax
};

std::vector<HostCurve> host_curves(const ModelConfig& c) {
  std::vector<HostCurve> curves;
  for (const PublishedRow& r : published_rows()) {
    if (!in_fit(r)) continue;
    HostCurve h{&r, {}};
    for (double us = 0; us <= kHostGridMax + 1e-9; us += kHostGridStep)
      h.tflops.push_back(check(c, r, us).prediction.tflops_per_gpu);
    curves.push_back(std::move(h));
  }
  return curves;
}

double tflops_at(const HostCurve& h, double us) {
  const double x = std::clamp(us, 0.0, kHostGridMax) / kHostGridStep;
  const size_t i = std::min(static_cast<size_t>(x), h.tflops.size() - 2);
  return h.tflops[i] + (x - double(i)) * (h.tflops[i + 1] - h.tflops[i]);
}

// Least squares of the log error over the curves, without row `skip`: golden-section search over
// [0, kHostGridMax] to 0.1 µs (more host time only ever slows a host-paced step, so the cost has
// one minimum up to the small steps the event timeline makes).
double fit_on(const std::vector<HostCurve>& curves, const std::string& skip) {
  auto cost = [&](double us) {
    double e = 0;
    for (const HostCurve& h : curves)
      if (h.row->id != skip) e += std::pow(std::log(tflops_at(h, us) / h.row->tflops), 2);
    return e;
  };
  const double g = (std::sqrt(5.0) - 1) / 2;
  double lo = 0, hi = kHostGridMax, x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  double f1 = cost(x1), f2 = cost(x2);
  while (hi - lo > 0.1) {
    if (f1 < f2)
      hi = x2, x2 = x1, f2 = f1, x1 = hi - g * (hi - lo), f1 = cost(x1);
    else
      lo = x1, x1 = x2, f1 = f2, x2 = lo + g * (hi - lo), f2 = cost(x2);
  }
  return (lo + hi) / 2;
}

}  // namespace

double fit_framework_host_us(const ModelConfig& dsv3, const std::string& skip) {
  return fit_on(host_curves(dsv3), skip);
}

std::vector<RowCheck> check_published_rows(const ModelConfig& dsv3, bool leave_one_out) {
  const std::vector<HostCurve> curves =
      leave_one_out ? host_curves(dsv3) : std::vector<HostCurve>{};
  std::vector<RowCheck> out;
  for (const PublishedRow& r : published_rows()) {
    const double catalog = system_of(r.system).eff.framework_host_us;
    const bool refit = leave_one_out && in_fit(r);
    out.push_back(check(dsv3, r, refit ? fit_on(curves, r.id) : catalog));
  }
  return out;
}

ErrorBand error_band(const std::vector<RowCheck>& checks, const std::string& cuda_graphs,
                     const std::string& model) {
  ErrorBand b;
  b.model = model;
  for (const RowCheck& c : checks) {
    if (c.row.model != model || c.row.layout.cuda_graphs != cuda_graphs) continue;
    b.low = b.rows ? std::min(b.low, c.error) : c.error;
    b.high = b.rows ? std::max(b.high, c.error) : c.error;
    ++b.rows;
  }
  return b;
}

}  // namespace moet::sim

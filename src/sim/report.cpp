#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moet::sim {

namespace {

nlohmann::json breakdown_json(const Breakdown& b) {
  return {{"compute", b.compute},     {"a2a_exposed", b.a2a_exposed},
          {"pp_bubble", b.pp_bubble}, {"dp_exposed", b.dp_exposed},
          {"optimizer", b.optimizer}, {"gemm", b.gemm},
          {"attention", b.attention}, {"memory_bound", b.memory_bound},
          {"tp_comm", b.tp_comm},     {"cp_comm", b.cp_comm},
          {"launch", b.launch},       {"contention", b.contention},
          {"recompute", b.recompute}, {"a2a_total", b.a2a_total},
          {"dp_total", b.dp_total}};
}

void print_breakdown(std::FILE* out, const Prediction& p) {
  const Breakdown& b = p.breakdown;
  auto pct = [&](double x) { return 100 * x / p.step_time_s; };
  char cp[32] = "";  // context parallelism's exchange, when there is one
  if (b.cp_comm > 0) std::snprintf(cp, sizeof cp, ", CP %.3f", b.cp_comm);
  std::fprintf(out,
               "    step %.3f s = compute %.3f (%.0f%%: GEMM %.3f, attention %.3f, memory-bound "
               "%.3f, TP %.3f%s, launch %.3f, comm contention %.3f)\n"
               "               + all-to-all exposed %.3f (%.0f%% of %.3f) + pipeline bubble %.3f "
               "(%.0f%%) + DP exposed %.3f (of %.3f) + optimizer %.3f\n",
               p.step_time_s, b.compute, pct(b.compute), b.gemm, b.attention, b.memory_bound,
               b.tp_comm, cp, b.launch, b.contention, b.a2a_exposed,
               b.a2a_total > 0 ? 100 * b.a2a_exposed / b.a2a_total : 0.0, b.a2a_total, b.pp_bubble,
               pct(b.pp_bubble), b.dp_exposed, b.dp_total, b.optimizer);
  const MemoryUse& m = p.memory;
  std::fprintf(out,
               "    memory %.1f GB = weights %.1f + gradients %.1f + optimizer %.1f + "
               "activations %.1f + reserve %.1f; all-to-all %.1f GB NVLink, %.1f GB scale-out "
               "per GPU per step; %lld micro-batches per rank\n",
               m.total(), m.weights, m.gradients, m.optimizer, m.activations, m.reserve,
               p.a2a_gb_nvlink, p.a2a_gb_scaleout, static_cast<long long>(p.micro_batches));
  if (!p.pp_layout.empty()) std::fprintf(out, "    pipeline layout %s\n", p.pp_layout.c_str());
}

nlohmann::json memory_json(const MemoryUse& m) {
  return {{"weights", m.weights},
          {"gradients", m.gradients},
          {"optimizer", m.optimizer},
          {"activations", m.activations},
          {"reserve", m.reserve}};
}

}  // namespace

std::string predictions_json(const std::vector<Prediction>& ps, bool with_efficiency) {
  nlohmann::json arr = nlohmann::json::array();
  for (const Prediction& p : ps) {
    nlohmann::json o = {{"tflops_per_gpu", p.tflops_per_gpu},
                        {"tokens_per_s_per_gpu", p.tokens_per_s_per_gpu},
                        {"step_time_s", p.step_time_s},
                        {"mfu", p.mfu},
                        {"memory_gb_per_gpu", p.memory_gb_per_gpu},
                        {"memory_gb", memory_json(p.memory)},
                        {"fits", p.fits},
                        {"breakdown", breakdown_json(p.breakdown)}};
    if (with_efficiency) o["efficiency"] = p.efficiency;
    arr.push_back(o);
  }
  return arr.dump(2) + "\n";
}

std::string flops_line(const Prediction& p) {
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "%.1f GFLOP per token (Megatron-Core's formula, seq %lld, MTP %lld)",
                p.flops_per_token / 1e9, static_cast<long long>(p.layout.seq),
                static_cast<long long>(p.layout.mtp));
  return buf;
}

void print_predictions(std::FILE* out, const SystemSpec& s, const std::vector<Prediction>& ps) {
  if (ps.empty()) return;
  std::fprintf(out, "%s, %s, %s\n", s.name.c_str(), recipe_name(ps.front().layout.precision),
               flops_line(ps.front()).c_str());
  std::fprintf(out, "%6s  %-44s %9s %10s %8s %6s %9s %5s %6s\n", "GPUs", "layout", "TFLOP/s",
               "tokens/s", "step s", "MFU", "mem GB", "fits", "eff");
  for (const Prediction& p : ps) {
    std::fprintf(out, "%6lld  %-44s %9.1f %10.1f %8.3f %5.1f%% %9.1f %5s %5.1f%%\n",
                 static_cast<long long>(p.layout.gpus), describe(p.layout).c_str(),
                 p.tflops_per_gpu, p.tokens_per_s_per_gpu, p.step_time_s, 100 * p.mfu,
                 p.memory_gb_per_gpu, p.fits ? "yes" : "NO", 100 * p.efficiency);
    print_breakdown(out, p);
  }
}

void print_plan(std::FILE* out, const SystemSpec& s, const Plan& plan, size_t top,
                const ErrorBand* band) {
  std::fprintf(out, "%lld layouts divide the model and %s; %lld do not fit in %.0f GB\n",
               static_cast<long long>(plan.considered), s.name.c_str(),
               static_cast<long long>(plan.too_big), s.hbm_gb);
  if (plan.ranked.empty()) return;
  std::fprintf(out, "%s\n", flops_line(plan.ranked.front()).c_str());
  const double best = plan.ranked.front().tflops_per_gpu;
  const double width = band ? std::max(std::abs(band->low), std::abs(band->high)) : 0;
  size_t equivalent = 0, runs = 0, shown = std::min(top, plan.ranked.size());
  for (size_t i = 0; i < shown; ++i) {
    const Prediction& p = plan.ranked[i];
    const bool same = i > 0 && band && best / p.tflops_per_gpu - 1 < width;
    equivalent += same;
    const std::string lacks = engine_lacks(p.layout);
    runs += lacks.empty();
    std::fprintf(out, "#%zu  %-52s %8.1f TFLOP/s/GPU %8.1f tokens/s/GPU  MFU %.1f%%%s  [%s]\n",
                 i + 1, describe(p.layout).c_str(), p.tflops_per_gpu, p.tokens_per_s_per_gpu,
                 100 * p.mfu, same ? "  (equivalent to #1 within the model's error)" : "",
                 lacks.empty() ? "moet train runs it" : ("moet train lacks " + lacks).c_str());
    print_breakdown(out, p);
  }
  std::fprintf(out, "moet train runs %zu of the %zu layouts shown%s\n", runs, shown,
               runs == shown ? "" : " (the others need --tp or --etp: docs/parallel.md)");
  std::fprintf(out, "why #1: %s\n", explain_winner(plan).c_str());
  if (band) {
    std::fprintf(out, "error band: %s\n", band_line(*band, "full").c_str());
    if (equivalent > 0)
      std::fprintf(out,
                   "%zu of the layouts shown are closer to #1 than that band: the model cannot "
                   "rank them\n",
                   equivalent);
  } else {
    std::fprintf(out, "error band: no published row validates this model\n");
  }
  std::fprintf(out, "assumes: %s\n", assumptions_line(plan.ranked.front().layout).c_str());
}

namespace {
std::string graphs_phrase(const std::string& g) {
  return g == "full"   ? "full-iteration CUDA graphs"
         : g == "none" ? "no CUDA graphs"
                       : g + " CUDA graphs";
}
}  // namespace

std::string assumptions_line(const SimLayout& l) {
  std::string r = l.recompute == "selective"
                      ? "selective recompute (" + l.selective_modules().names() + ")"
                  : l.recompute == "none" ? std::string("no recompute")
                                          : l.recompute + " recompute";
  char imb[64];
  std::snprintf(imb, sizeof imb, "%.2f", l.expert_imbalance);
  // the FP4 recipes have no published row to check against: say what stands in for one
  const std::string fp4 =
      is_fp4_recipe(l.precision)
          ? str(", ", recipe_name(l.precision),
                " GEMMs at MXFP8's efficiency of the FP4 peak (no FP4 GEMM shape table is "
                "published), tokens to the experts as E2M1 codes with their block scales at the "
                "FP8 dispatch's all-to-all efficiency, the quantizers and the Hadamard "
                "transform as memory-bound casts, bf16 weights gathered (no FP4 parameter "
                "gather); the error band is the MXFP8 rows'")
          : std::string();
  return str(graphs_phrase(l.cuda_graphs), ", all-to-all overlap ",
             l.a2a_overlap ? "on (combined 1F1B)" : "off", ", ", r, ", ",
             l.expert_imbalance == 1.0 ? "force-balanced routing" : str("expert imbalance ", imb),
             ", data-parallel overlap ", l.dp_overlap ? "on" : "off", fp4);
}

std::string band_line(const ErrorBand& b, const std::string& cuda_graphs) {
  const char* model = b.model == "kimi-k2" ? "Kimi-K2" : "DeepSeek-V3";
  if (b.rows == 0)
    return str("none: no published ", model, " row ran with ", graphs_phrase(cuda_graphs),
               " (`moet published`, docs/simulator.md)");
  const char* host = cuda_graphs == "full"  ? ""
                     : b.model == "kimi-k2" ? ", the host constant fitted to DeepSeek-V3's rows"
                                            : ", each predicted with the host constant fitted "
                                              "without it";
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "%+.0f%% to %+.0f%% (the errors of %d published %s rows run with %s%s; "
                "`moet published`, docs/simulator.md)",
                100 * b.low, 100 * b.high, b.rows, model, graphs_phrase(cuda_graphs).c_str(), host);
  return buf;
}

std::string tokens_line(const Prediction& p, double tokens) {
  const double seconds = tokens / (p.tokens_per_s_per_gpu * double(p.layout.gpus));
  char buf[200];
  std::snprintf(buf, sizeof buf, "%.3g tokens on %lld GPUs: %.1f days, %.0f GPU-hours", tokens,
                static_cast<long long>(p.layout.gpus), seconds / 86400,
                seconds / 3600 * double(p.layout.gpus));
  return buf;
}

void print_published(std::FILE* out, const std::vector<RowCheck>& checks) {
  std::fprintf(
      out,
      "| row | model | container | system | GPUs | layout | precision, MTP | CUDA graphs | "
      "all-to-all overlap | recompute | published | predicted | error |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const RowCheck& c : checks) {
    const SimLayout& l = c.row.layout;
    std::fprintf(out,
                 "| %s | %s | %s | %s | %lld | TP%lld PP%lld VPP%lld EP%lld MBS%lld GBS%lld | %s, "
                 "%lld | %s | %s | %s%s | %.0f | %.0f | %+.1f%% |\n",
                 c.row.id.c_str(), c.row.model == "kimi-k2" ? "Kimi-K2" : "DeepSeek-V3",
                 c.row.container.c_str(), c.row.system.c_str(), static_cast<long long>(l.gpus),
                 static_cast<long long>(l.tp), static_cast<long long>(l.pp),
                 static_cast<long long>(l.vpp), static_cast<long long>(l.ep),
                 static_cast<long long>(l.mbs), static_cast<long long>(l.gbs),
                 recipe_name(l.precision), static_cast<long long>(l.mtp), l.cuda_graphs.c_str(),
                 l.a2a_overlap ? "on" : "off",
                 l.recompute == "none" ? "none" : l.selective_modules().names().c_str(),
                 c.row.flags_known ? "" : " (flags not published: the release's preset)",
                 c.row.tflops, c.prediction.tflops_per_gpu, 100 * c.error);
  }
}

}  // namespace moet::sim

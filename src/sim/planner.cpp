#include "sim/planner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace moet::sim {

namespace {

// The pipeline schedules a layout can run: interleaved 1F1B (1F1B with VPP 1) always; with a
// pipeline, zb1p at VPP 1 and the V schedules zbv and dualpipev at VPP 2.
std::vector<PipelineScheduleKind> schedules_for(int64_t pp, int64_t vpp) {
  using K = PipelineScheduleKind;
  if (pp == 1) return {K::kInterleaved};
  if (vpp == 1) return {K::kInterleaved, K::kZB1P};
  if (vpp == 2) return {K::kInterleaved, K::kZBV, K::kDualPipeV};
  return {K::kInterleaved};
}

}  // namespace

Plan plan_layouts(const ModelConfig& c, const SystemSpec& s, const PlanRequest& r) {
  Plan plan;
  const std::vector<int64_t> tps = {1, 2, 4, 8}, pps = {1, 2, 4, 8, 16, 32};
  const std::vector<int64_t> vpps = {1, 2, 4, 8, 16}, mbss = {1, 2, 4};
  const std::vector<std::string> recomputes = {"none", "selective", "full"};
  std::vector<int64_t> eps;
  for (int64_t e = 1; e <= std::max<int64_t>(1, c.n_routed_experts); e *= 2)
    if (c.n_routed_experts == 0 ? e == 1 : c.n_routed_experts % e == 0) eps.push_back(e);
  for (int64_t tp : tps)
    for (int64_t pp : pps)
      for (int64_t vpp : vpps)
        for (int64_t ep : eps)
          for (int64_t mbs : mbss)
            for (const std::string& rc : recomputes)
              for (PipelineScheduleKind sched : schedules_for(pp, vpp)) {
                SimLayout l;
                l.gpus = r.gpus, l.tp = tp, l.pp = pp, l.vpp = vpp, l.ep = ep, l.mbs = mbs;
                l.gbs = r.gbs, l.seq = r.seq, l.precision = r.precision, l.mtp = r.mtp;
                l.recompute = rc;
                l.schedule = sched;
                if (rc == "selective") l.recompute_modules = moe_recipe_recompute_modules();
                l.pp_layout = "balanced";            // the layout a user would write for it
                if (tp > s.nvlink_domain) continue;  // TP stays inside NVLink
                try {
                  validate(c, l);
                } catch (const Error&) {
                  continue;  // does not divide
                }
                ++plan.considered;
                Prediction p = simulate(c, l, s);
                if (!p.fits) {
                  ++plan.too_big;
                  continue;
                }
                plan.ranked.push_back(std::move(p));
              }
  std::stable_sort(
      plan.ranked.begin(), plan.ranked.end(),
      [](const Prediction& a, const Prediction& b) { return a.tflops_per_gpu > b.tflops_per_gpu; });
  return plan;
}

std::string explain_winner(const Plan& plan) {
  if (plan.ranked.empty()) return "no layout fits";
  const Prediction& best = plan.ranked.front();
  if (plan.ranked.size() == 1) return "it is the only layout that fits";
  const Prediction& next = plan.ranked[1];
  const Breakdown &a = best.breakdown, &b = next.breakdown;
  std::vector<std::pair<double, std::string>> gains = {
      {b.compute - a.compute, "compute"},
      {b.a2a_exposed - a.a2a_exposed, "exposed all-to-all"},
      {b.pp_bubble - a.pp_bubble, "pipeline bubble"},
      {b.dp_exposed - a.dp_exposed, "exposed data-parallel traffic"},
      {b.optimizer - a.optimizer, "optimizer"}};
  std::sort(gains.begin(), gains.end(), [](auto& x, auto& y) { return x.first > y.first; });
  std::string why =
      str(describe(best.layout), " beats ", describe(next.layout), " by ",
          std::round(1000 * (best.tflops_per_gpu / next.tflops_per_gpu - 1)) / 10, "%: ");
  bool first = true;
  for (auto& [d, what] : gains) {
    if (std::abs(d) < 1e-4 * best.step_time_s) continue;
    why += str(first ? "" : ", ", what, d > 0 ? " -" : " +", std::round(std::abs(d) * 1000), " ms");
    first = false;
  }
  if (a.recompute < b.recompute) why += "; it recomputes less";
  return why + " per step";
}

}  // namespace moet::sim

#include "sim/parallel_layout.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/pipeline_layout.h"

namespace moet::sim {

int64_t mtp_depth(const ModelConfig& c, const SimLayout& l) {
  return l.mtp >= 0 ? l.mtp : c.num_nextn_predict_layers;
}

int64_t pipeline_slots(const ModelConfig& c, const SimLayout& l) {
  return c.num_hidden_layers + mtp_depth(c, l) + (l.pp > 1 ? 2 : 0);
}

void validate(const ModelConfig& c, const SimLayout& l) {
  auto positive = [](int64_t v, const char* what) {
    if (v < 1) throw Error(str(what, " must be at least 1 (got ", v, ")"));
  };
  if (l.cuda_graphs != "full" && l.cuda_graphs != "partial" && l.cuda_graphs != "none")
    throw Error(str("--cuda-graphs '", l.cuda_graphs, "' is not one of full, partial, none"));
  positive(l.gpus, "--gpus");
  positive(l.tp, "--tp");
  positive(l.cp, "--cp");
  positive(l.pp, "--pp");
  positive(l.vpp, "--vpp");
  positive(l.ep, "--ep");
  positive(l.etp, "--etp");
  positive(l.mbs, "--mbs");
  positive(l.gbs, "--gbs");
  positive(l.seq, "--seq");
  if (l.recompute != "none" && l.recompute != "selective" && l.recompute != "full")
    throw Error(str("--recompute '", l.recompute, "' is not one of none, selective, full"));
  if (!l.recompute_modules.empty() && l.recompute != "selective")
    throw Error("--recompute-modules needs --recompute selective");
  if (l.mtp > 0 && !c.mtp_is_moe() && c.n_routed_experts > 0)
    throw Error("--mtp needs a model whose last layer is MoE");
  if (!(l.expert_imbalance >= 1.0))
    throw Error(str("--expert-imbalance ", l.expert_imbalance,
                    " must be at least 1 (the busiest rank's expert rows over the mean)"));
  if (l.vpp > 1 && l.pp == 1 && l.schedule == PipelineScheduleKind::kInterleaved)
    throw Error("--vpp > 1 needs --pp > 1");
  if (l.gpus % (l.tp * l.cp * l.pp) != 0)
    throw Error(l.cp == 1 ? str("--gpus ", l.gpus, " does not divide by TP×PP = ", l.tp, "×", l.pp,
                                " = ", l.tp * l.pp)
                          : str("--gpus ", l.gpus, " does not divide by TP×CP×PP = ", l.tp, "×",
                                l.cp, "×", l.pp, " = ", l.tp * l.cp * l.pp));
  if (l.seq % (2 * l.cp) != 0)
    throw Error(str("--seq ", l.seq, " does not split into the 2·CP = ", 2 * l.cp,
                    " load-balanced chunks of context parallelism: choose a --cp whose 2·CP "
                    "divides the sequence"));
  if (c.num_attention_heads % l.tp != 0)
    throw Error(
        str("TP ", l.tp, " does not divide the ", c.num_attention_heads, " attention heads"));
  if (c.n_routed_experts > 0) {
    if (c.n_routed_experts % l.ep != 0)
      throw Error(str("EP ", l.ep, " does not divide the ", c.n_routed_experts, " routed experts"));
    if (c.moe_intermediate_size % l.etp != 0)
      throw Error(
          str("ETP ", l.etp, " does not divide moe_intermediate_size ", c.moe_intermediate_size));
    if ((l.tp * l.cp * l.dp()) % (l.ep * l.etp) != 0)
      throw Error(str("EP×ETP = ", l.ep * l.etp, " does not divide the ", l.tp * l.cp * l.dp(),
                      l.cp == 1 ? " GPUs of a pipeline stage (TP×DP)"
                                : " GPUs of a pipeline stage (TP×CP×DP)"));
  } else if (l.ep > 1) {
    throw Error("--ep > 1 needs a model with routed experts");
  }
  if (l.pp_layout == "balanced") {
    if (l.stages() > c.num_hidden_layers + mtp_depth(c, l) + 2)
      throw Error(str("PP×VPP = ", l.stages(), " virtual stages exceed the pipeline slots"));
  } else if (!l.pp_layout.empty()) {
    stages_of_slots(c, l);  // throws when the layout string does not fit
  } else if (l.pp > 1 && pipeline_slots(c, l) % l.stages() != 0)
    throw Error(str("PP×VPP = ", l.pp, "×", l.vpp, " = ", l.stages(),
                    " virtual stages do not divide the ", pipeline_slots(c, l), " pipeline slots (",
                    c.num_hidden_layers, " layers + ", mtp_depth(c, l),
                    " MTP + embedding + loss)"));
  if (l.pp == 1 && l.stages() > pipeline_slots(c, l))
    throw Error("more virtual stages than layers");
  if (l.gbs % (l.mbs * l.dp()) != 0)
    throw Error(str("--gbs ", l.gbs, " does not divide by MBS×DP = ", l.mbs, "×", l.dp(), " = ",
                    l.mbs * l.dp()));
  if (l.schedule != PipelineScheduleKind::kInterleaved)
    check_pipeline_schedule(l.schedule_spec(l.micro_batches()));
}

std::vector<size_t> stages_of_slots(const ModelConfig& c, const SimLayout& l) {
  const int64_t layers = c.num_hidden_layers, mtp = mtp_depth(c, l);
  const size_t slots = size_t(layers + mtp + 2);  // embedding, layers, MTP, loss
  std::vector<size_t> stage_of(slots, 0);
  if (l.pp_layout.empty()) {
    if (l.pp == 1) {
      // One stage per virtual chunk, without embedding and loss in the count.
      for (size_t i = 0; i < slots; ++i) stage_of[i] = 0;
      return stage_of;
    }
    const size_t per = slots / size_t(l.stages());
    for (size_t i = 0; i < slots; ++i) stage_of[i] = std::min(i / per, size_t(l.stages() - 1));
    return stage_of;
  }
  return parse_pipeline_layout(l.pp_layout, layers, mtp, l.stages());
}

std::string format_pp_layout(const ModelConfig& c, const SimLayout& l,
                             const std::vector<size_t>& stage_of) {
  const int64_t layers = c.num_hidden_layers;
  std::vector<std::string> stages(size_t(l.stages()));
  for (size_t i = 0; i < stage_of.size(); ++i) {
    const char kind = i == 0                     ? 'E'
                      : i <= size_t(layers)      ? 't'
                      : i + 1 == stage_of.size() ? 'L'
                                                 : 'm';
    stages[stage_of[i]] += kind;
  }
  // Runs of one kind as "t*4"; runs of equal stages as "(t*4|)*14".
  auto compress = [](const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t j = i;
      while (j < s.size() && s[j] == s[i]) ++j;
      out.push_back(s[i]);
      if (j - i > 1) out.append("*").append(std::to_string(j - i));
      i = j;
    }
    return out;
  };
  std::string out;
  for (size_t i = 0; i < stages.size();) {
    size_t j = i;
    while (j < stages.size() && stages[j] == stages[i]) ++j;
    const std::string s = compress(stages[i]);
    const size_t n = j - i;
    if (n == 1) {
      out.append(s).push_back('|');
    } else {
      // A trailing group would end with an empty stage: repeat one less, then the stage.
      const bool last = j == stages.size();
      out.append("(").append(s).append("|)*").append(std::to_string(last ? n - 1 : n));
      if (last) out.append(s);
    }
    i = j;
  }
  if (!out.empty() && out.back() == '|') out.pop_back();
  return out;
}

RecomputeModules SimLayout::selective_modules() const {
  RecomputeModules m = recompute_modules;
  if (recompute == "selective" && m.empty()) m.add(RecomputeModule::kCoreAttn);
  return recompute == "selective" ? m : RecomputeModules{};
}

PipelineScheduleSpec SimLayout::schedule_spec(int64_t m) const {
  PipelineScheduleSpec s;
  s.stages = pp, s.chunks = vpp, s.microbatches = m, s.kind = schedule;
  // combined 1F1B's one more warm-up forward; DualPipeV's pairs are in its own list
  s.ep_overlap = a2a_overlap && schedule == PipelineScheduleKind::kInterleaved;
  return s;
}

std::string engine_lacks(const SimLayout& l) {
  // moet train runs --tp only for models without MoE layers (the planner's layouts are MoE
  // models), and has no --cp or --etp yet (issue 40); PP, VPP, EP, DP, every schedule and
  // recompute choice it runs.
  std::string lacks;
  if (l.tp > 1) lacks += str("--tp ", l.tp);
  if (l.cp > 1) lacks += str(lacks.empty() ? "" : " ", "--cp ", l.cp);
  if (l.etp > 1) lacks += str(lacks.empty() ? "" : " ", "--etp ", l.etp);
  return lacks;
}

std::string describe(const SimLayout& l) {
  std::string rc;
  if (l.recompute == "selective")
    rc = " recompute=selective(" + l.selective_modules().names() + ")";
  else if (l.recompute != "none")
    rc = " recompute=" + l.recompute;
  const std::string sched = l.schedule == PipelineScheduleKind::kInterleaved
                                ? ""
                                : std::string(" ") + pipeline_schedule_name(l.schedule);
  return str("TP", l.tp, l.cp > 1 ? str(" CP", l.cp) : std::string(), " PP", l.pp, " VPP", l.vpp,
             sched, " EP", l.ep, " ETP", l.etp, " DP", l.dp(), " MBS", l.mbs, " GBS", l.gbs, rc);
}

}  // namespace moet::sim

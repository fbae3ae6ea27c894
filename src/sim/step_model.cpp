#include "sim/step_model.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "metrics/flops.h"
#include "model/recipe.h"
#include "parallel/pipeline_schedule.h"
#include "sim/cost_model.h"
#include "sim/step_timeline.h"

namespace moet::sim {

namespace {

// A collective moving `bytes` per rank over a group with `k` members in each of `g` domains:
// within the domain over NVLink, then 1/k of it across domains over the NIC (two-level
// reduce-scatter / all-gather, as NCCL's NVLS/tree and hierarchical algorithms do).
double collective_s(const SystemSpec& s, double bytes, double k, double g, int share) {
  const double nvl = s.nvlink_gbps * 1e9 * s.eff.collective_nvlink / share;
  const double nic = s.scaleout_gbps * 1e9 * s.eff.collective_scaleout;
  return bytes * (k - 1) / k / nvl + (g > 1 ? bytes / k * (g - 1) / g / nic : 0);
}

// Members of a group of `size` ranks with stride `stride` that share a domain of `rpd` ranks.
double members_per_domain(int64_t size, int64_t stride, int64_t rpd) {
  return double(std::clamp<int64_t>(rpd / std::max<int64_t>(stride, 1), 1, size));
}

// Micro-batch chunks pipeline rank r runs forward before its first backward: the engine's own
// schedule generator (src/parallel/pipeline_schedule.h), uncapped by the micro-batch count.
int64_t warmup_chunks(int64_t P, int64_t V, int64_t r) {
  if (P == 1) return 0;
  PipelineScheduleSpec spec;
  spec.stages = P;
  spec.chunks = V;
  spec.microbatches = std::numeric_limits<int32_t>::max();
  return pipeline_warmup_passes(spec, r);
}

// The most micro-batch chunks each rank holds activations of at once under the layout's
// schedule: interleaved 1F1B's warm-up plus one, at most m·V; the other schedules count their
// own lists (a chunk's activations held from its forward until its weight gradient).
std::vector<int64_t> chunks_in_flight(const SimLayout& l, int64_t m) {
  const int64_t V = l.vpp;
  std::vector<int64_t> most(size_t(l.pp), 0);
  if (l.schedule == PipelineScheduleKind::kInterleaved) {
    for (int64_t r = 0; r < l.pp; ++r)
      most[size_t(r)] = std::min<int64_t>(m * V, warmup_chunks(l.pp, V, r) + 1);
    return most;
  }
  const std::vector<std::vector<PipelinePass>> lists = pipeline_schedules(l.schedule_spec(m));
  for (size_t r = 0; r < lists.size(); ++r) {
    int64_t n = 0;
    for (const PipelinePass& p : lists[r]) {
      n += p.forward() ? 1 : p.releases() ? -1 : 0;
      most[r] = std::max(most[r], n);
    }
  }
  return most;
}

// Cuts the slots into `n` contiguous non-empty stages whose largest work (forward + backward +
// all-to-all) is smallest, as a hand-written Megatron pipeline layout does (the GB300 record's
// `Et*4|(t*4|)*14tmL` gives the first stage a layer more and the stage with MTP and loss fewer).
// Returns the stage of each slot.
std::vector<size_t> balanced_stages(const std::vector<SlotCost>& slots, size_t n) {
  const size_t S = slots.size();
  MOET_ASSERT(n >= 1 && n <= S);
  std::vector<double> prefix(S + 1, 0);
  for (size_t i = 0; i < S; ++i)
    prefix[i + 1] = prefix[i] + slots[i].fwd() + slots[i].bwd() + slots[i].a2a_f + slots[i].a2a_b;
  // best[j][i]: the smallest largest stage when the first i slots form j stages.
  const double inf = 1e300;
  std::vector<std::vector<double>> best(n + 1, std::vector<double>(S + 1, inf));
  std::vector<std::vector<size_t>> cut(n + 1, std::vector<size_t>(S + 1, 0));
  best[0][0] = 0;
  for (size_t j = 1; j <= n; ++j)
    for (size_t i = j; i <= S - (n - j); ++i)
      for (size_t k = j - 1; k < i; ++k) {
        const double v = std::max(best[j - 1][k], prefix[i] - prefix[k]);
        if (v < best[j][i]) best[j][i] = v, cut[j][i] = k;
      }
  std::vector<size_t> stage_of(S);
  for (size_t j = n, i = S; j >= 1; i = cut[j][i], --j)
    for (size_t s = cut[j][i]; s < i; ++s) stage_of[s] = j - 1;
  return stage_of;
}

struct RankWork {
  double f = 0, b = 0;
  double gemm = 0, attn = 0, mem = 0, tp = 0, cp = 0, launch = 0, recompute = 0, a2a = 0;
  double a2a_nvl = 0, a2a_nic = 0, act = 0, dense = 0, expert = 0;
  double redo = 0;  // the most any one slot's recomputation makes again
  int layers = 0;
};

void append(Chain& c, bool exchange, double s) {
  if (s <= 0) return;
  if (!c.empty() && !exchange && !c.back().exchange)
    c.back().s += s;  // compute after compute: one interval
  else
    c.push_back({exchange, s});
}

// A slot's forward: what comes before the dispatch, the dispatch, the experts, the combine.
void forward_chain(Chain& c, const SlotCost& w) {
  if (w.a2a_f <= 0) return append(c, false, w.fwd());
  append(c, false, std::max(0.0, w.fwd() - w.experts_f));
  append(c, true, w.dispatch_f);
  append(c, false, w.experts_f);
  append(c, true, w.a2a_f - w.dispatch_f);
}

// Its backward, the mirror: the combine's gradient, the experts, the dispatch's, the rest.
void backward_chain(Chain& c, const SlotCost& w) {
  if (w.a2a_b <= 0) return append(c, false, w.bwd());
  append(c, true, w.a2a_b / 2);
  append(c, false, w.experts_b);
  append(c, true, w.a2a_b / 2);
  append(c, false, std::max(0.0, w.bwd() - w.experts_b));
}

// The step's timeline: the engine's schedule over the virtual stages' chains, or, for a
// micro-batch count Megatron refuses, each rank's chunks as one stage of its own plus the closed
// form of the interleaved bubble, (P − 1)/V micro-batches and the fill and drain hops.
StepTimeline step_events(const PipelineScheduleSpec& spec, const std::vector<Chain>& fwd,
                         const std::vector<Chain>& bwd, const TimelineOptions& opt) {
  const int64_t P = spec.stages, V = spec.chunks, m = spec.microbatches;
  if (spec.kind != PipelineScheduleKind::kInterleaved)  // validate() checked it
    return run_step_timeline(spec, fwd, bwd, opt);
  bool megatron_valid = true;
  try {
    check_pipeline_schedule(spec);
  } catch (const Error&) {
    megatron_valid = false;
  }
  if (megatron_valid) return run_step_timeline(spec, fwd, bwd, opt);
  StepTimeline tl;
  PipelineScheduleSpec one;
  one.microbatches = m;
  for (int64_t r = 0; r < P; ++r) {
    Chain f1, b1;
    for (int64_t v = 0; v < V; ++v) {
      for (const Interval& x : fwd[size_t(v * P + r)]) append(f1, x.exchange, x.s);
      for (const Interval& x : bwd[size_t((V - 1 - v) * P + r)]) append(b1, x.exchange, x.s);
    }
    RankTimeline rt = run_step_timeline(one, {f1}, {b1}, opt).ranks[0];
    rt.idle = double(P - 1) / double(V) * rt.busy() / double(m) + 2.0 * double(P - 1) * opt.p2p_s;
    tl.ranks.push_back(rt);
    tl.step_s = std::max(tl.step_s, rt.busy() + rt.idle);
  }
  return tl;
}

// Data parallel: fp32 gradients reduce-scattered, parameters all-gathered, dense over DP
// (stride TP), experts over expert-DP (stride EP·ETP); hidden behind the last backward and the
// first forward when overlapped.
void data_parallel(Breakdown& b, const SimLayout& l, const SystemSpec& s, const RankWork& slow,
                   int64_t m, double act_b, const std::vector<int64_t>& held) {
  const int64_t V = l.vpp;
  const int rpd = s.ranks_per_domain(int(l.gpus));
  const int share = s.compute_shared ? int(l.gpus) : 1;
  const bool quant = is_fp8_recipe(l.precision);
  // FP8 primary weights (Megatron's --fp8-param-gather): gathered in one byte.
  const double grad_b = 4, param_b = quant ? 1 : act_b;
  // dense gradients over the data- and context-parallel ranks (stride TP), as Megatron's dp-cp
  // group
  const int64_t dcp = l.dp() * l.cp;
  const double kd = members_per_domain(dcp, l.tp, rpd), gd = double(dcp) / kd;
  const double ke = members_per_domain(l.edp(), l.ep * l.etp, rpd), ge = double(l.edp()) / ke;
  auto coll = [&](double bytes_per_param) {
    return collective_s(s, slow.dense * bytes_per_param, kd, gd, share) +
           collective_s(s, slow.expert * bytes_per_param, ke, ge, share);
  };
  const double rs = coll(grad_b), ag = coll(param_b);
  b.dp_total = rs + ag;
  if (!l.dp_overlap) {
    b.dp_exposed = rs + ag;
  } else {
    // Gradients are final during the last micro-batch's backward (the cooldown of the
    // interleaved schedule); parameters are gathered under the first forward. The last
    // bucket (one layer's worth) cannot hide.
    const double cool = l.schedule == PipelineScheduleKind::kInterleaved
                            ? double(std::min<int64_t>(m * V, warmup_chunks(l.pp, V, 0)))
                            : double(std::max<int64_t>(1, held[0] - 1));
    const double widen = std::max(1.0, cool / double(V));
    const double buckets = std::max(1, slow.layers);
    auto exposed = [&](double t, double window) {
      return std::max(t / buckets, t - window) + s.eff.collective_sm_fraction * std::min(t, window);
    };
    b.dp_exposed = exposed(rs, slow.b * widen) + exposed(ag, slow.f * widen);
  }
}

// Each slot's work onto the rank of its virtual stage (the schedule's placement: stage j on rank
// j % P, or the V's), and its passes onto that stage's forward and backward chains; `timed` is
// the time of one micro-batch, lane by lane (`lanes` of them), `slots` its bytes and parameters.
void place_slots(const std::vector<SlotCost>& slots, const std::vector<SlotCost>& timed,
                 double lanes, const std::vector<size_t>& stage_of,
                 const PipelineScheduleSpec& spec, std::vector<RankWork>& ranks,
                 std::vector<Chain>& fwd, std::vector<Chain>& bwd, std::vector<double>& copy) {
  copy.assign(fwd.size(), 0.0);
  for (size_t i = 0; i < slots.size(); ++i) {
    const SlotCost& w = slots[i];
    const SlotCost& t = timed[i];
    copy[stage_of[i]] += lanes * t.wgrad_copy;
    RankWork& r = ranks[size_t(pipeline_place(spec, int64_t(stage_of[i])).rank)];
    r.f += lanes * t.fwd(), r.b += lanes * t.bwd();
    r.gemm += lanes * (t.gemm_f + t.gemm_b), r.attn += lanes * (t.attn_f + t.attn_b);
    r.mem += lanes * (t.mem_f + t.mem_b), r.tp += lanes * (t.tp_f + t.tp_b);
    r.cp += lanes * (t.cp_f + t.cp_b);
    r.launch += lanes * (t.launch_f + t.launch_b), r.recompute += lanes * t.recompute;
    r.a2a += lanes * (t.a2a_f + t.a2a_b);
    r.a2a_nvl += w.a2a_bytes_nvlink, r.a2a_nic += w.a2a_bytes_scaleout;
    r.act += w.act_bytes, r.dense += w.dense_params, r.expert += w.expert_params;
    r.redo = std::max(r.redo, w.redo_bytes);
    if (w.name != "embedding" && w.name != "loss") ++r.layers;
    forward_chain(fwd[stage_of[i]], t);
  }
  for (size_t i = slots.size(); i-- > 0;) backward_chain(bwd[stage_of[i]], timed[i]);
}

// The event timeline's options for the step: the exchange's SM share, combined passes or two
// lanes, the zero-bubble schedules' W share and moet's I copies, the pipeline hop.
TimelineOptions timeline_options(const ModelConfig& c, const SimLayout& l, const SystemSpec& s,
                                 const PipelineScheduleSpec& spec,
                                 const std::vector<SlotCost>& timed,
                                 const std::vector<double>& input_copy, bool two_lanes) {
  TimelineOptions opt;
  opt.sm_fraction = s.eff.a2a_sm_fraction;
  opt.pair_passes = l.a2a_overlap && !two_lanes;
  opt.two_lanes = two_lanes;
  // W of the zero-bubble schedules: half of the backward GEMMs' time (the weight-gradient GEMMs;
  // core attention, the memory-bound kernels and the recomputed forward stay in I)
  double gemm_b = 0, all_b = 0;
  for (const SlotCost& t : timed) gemm_b += std::max(0.0, t.gemm_b - t.recompute), all_b += t.bwd();
  opt.weight_share = all_b > 0 ? 0.5 * gemm_b / all_b : 0.0;
  // moet's I copies what its W reads (its buffers are reused meanwhile); Megatron's delayed
  // weight gradient keeps the tensors alive instead: only the systems whose ranks run moet pay
  if (splits_backward(spec.kind) && s.compute_shared) opt.input_copy_s = input_copy;
  if (l.pp > 1) {
    const bool neighbour_in_domain = l.gpus / l.pp < s.ranks_per_domain(int(l.gpus));
    const double link = neighbour_in_domain ? s.nvlink_gbps * 1e9 * s.eff.collective_nvlink
                                            : s.scaleout_gbps * 1e9 * s.eff.collective_scaleout;
    opt.p2p_s = double(l.mbs * l.seq) * double(c.hidden_size) * activation_bytes(l.precision) /
                double(l.tp) / link;
  }
  return opt;
}

// Memory of the fullest rank: weights (plus FP8 row/column copies), fp32 gradients,
// optimizer state (fp32 master and two moments over `shard` parameters), activations of the
// micro-batch chunks in flight (rank 0 of the interleaved schedule holds the most) and what
// recomputation makes again for the one slot in backward.
MemoryUse memory_use(const SimLayout& l, const SystemSpec& s, const std::vector<RankWork>& ranks,
                     const std::vector<int64_t>& held, const RankWork& slow, double shard) {
  const int64_t P = l.pp, V = l.vpp;
  MemoryUse mu;
  const double params = slow.dense + slow.expert;
  const bool quant = is_fp8_recipe(l.precision);
  // FP8 primary weights keep row- and column-wise FP8 copies instead of a BF16 one.
  mu.weights = params * (quant ? 2 : activation_bytes(l.precision)) / 1e9;
  mu.gradients = params * 4 / 1e9;
  mu.optimizer = 12 * shard / 1e9;
  double act_max = 0;
  for (int64_t r = 0; r < P; ++r) {
    const double in_flight = double(held[size_t(r)]);
    const RankWork& w = ranks[size_t(r)];
    act_max = std::max(act_max, w.act / double(V) * in_flight + w.redo);
  }
  mu.activations = act_max / 1e9;
  mu.reserve = s.memory_reserve_gb;
  return mu;
}

}  // namespace

Prediction simulate(const ModelConfig& c, const SimLayout& l, const SystemSpec& s) {
  validate(c, l);
  s.peak(gemm_format(l.precision));  // throws if the system has no such precision
  Prediction p;
  p.layout = l;
  p.layout.mtp = mtp_depth(c, l);
  const std::vector<SlotCost> slots = slot_costs(c, l, s);
  // moet's own --a2a-overlap without a pipeline (the systems whose ranks run moet): each
  // micro-batch in two lanes of half its sequences, interleaved layer by layer; the timeline
  // runs each lane's chains, at their smaller GEMMs' speed.
  const bool two_lanes = s.compute_shared && l.a2a_overlap && l.pp == 1 && l.mbs % 2 == 0;
  SimLayout half = l;
  half.mbs = l.mbs / 2;
  const std::vector<SlotCost> timed = two_lanes ? slot_costs(c, half, s) : slots;
  const double lanes = two_lanes ? 2 : 1;
  const int64_t P = l.pp, V = l.vpp, m = l.micro_batches();
  p.micro_batches = m;
  const int share = s.compute_shared ? int(l.gpus) : 1;  // ranks sharing the one machine

  // Slots in pipeline order, cut into P·V virtual stages; stage j runs on rank j % P.
  std::vector<RankWork> ranks(P);
  std::vector<Chain> fwd(size_t(P * V)), bwd(size_t(P * V));  // each virtual stage's passes
  const std::vector<size_t> stage_of = l.pp_layout == "balanced"
                                           ? balanced_stages(slots, size_t(l.stages()))
                                           : stages_of_slots(c, l);
  if (l.pp > 1) p.pp_layout = format_pp_layout(c, l, stage_of);
  const PipelineScheduleSpec spec = l.schedule_spec(m);
  std::vector<double> input_copy;  // per virtual stage
  place_slots(slots, timed, lanes, stage_of, spec, ranks, fwd, bwd, input_copy);

  // The step as events (step_timeline.h): the engine's own schedule (pipeline_schedule) orders
  // each rank's passes; with the all-to-all overlap, combined 1F1B runs a forward and the
  // backward after it together, so one's exchange runs under the other's compute where the
  // order allows it, and the exchange's SMs slow that compute. Without it nothing hides the
  // exchange: Megatron's shared-expert overlap exists only for its alltoall dispatcher, and the
  // DeepSeek-V3 recipes use the flex (DeepEP/HybridEP) one. Stage-to-stage hops go over NVLink
  // when neighbouring stages share a domain, else over the NIC.
  const double act_b = activation_bytes(l.precision);
  const TimelineOptions opt = timeline_options(c, l, s, spec, timed, input_copy, two_lanes);
  const StepTimeline tl = step_events(spec, fwd, bwd, opt);
  // The breakdown is the busiest rank's: what it computes, the SMs the exchange took from it,
  // its exchange with no compute beside it, and its waiting (the bubble).
  size_t busiest = 0;
  for (size_t r = 1; r < tl.ranks.size(); ++r)
    if (tl.ranks[r].busy() > tl.ranks[busiest].busy()) busiest = r;
  const RankWork& slow = ranks[busiest];
  const RankTimeline& rt = tl.ranks[busiest];
  Breakdown& b = p.breakdown;
  b.compute = rt.compute + rt.contention;
  b.a2a_exposed = rt.exposed;
  b.pp_bubble = std::max(0.0, tl.step_s - rt.busy());
  b.gemm = double(m) * slow.gemm, b.attention = double(m) * slow.attn;
  b.memory_bound = double(m) * slow.mem, b.tp_comm = double(m) * slow.tp;
  b.cp_comm = double(m) * slow.cp;
  b.launch = double(m) * slow.launch, b.contention = rt.contention;
  b.recompute = double(m) * slow.recompute, b.a2a_total = double(m) * slow.a2a;

  const std::vector<int64_t> held = chunks_in_flight(l, m);  // per rank
  data_parallel(b, l, s, slow, m, act_b, held);

  // Optimizer: AdamW over this rank's shard, memory-bound: ~36 bytes per parameter (fp32
  // gradient, master weight, two moments read and written, the working copy written, the
  // gradient norm and zeroing).
  const double shard = l.distributed_optimizer
                           ? slow.dense / double(l.dp()) + slow.expert / double(l.edp())
                           : slow.dense + slow.expert;
  b.optimizer = shard * 36.0 / (s.hbm_tbps * 1e12 * s.eff.hbm / share);

  p.step_time_s = b.compute + b.a2a_exposed + b.pp_bubble + b.dp_exposed + b.optimizer;
  ModelConfig cm = c;
  cm.num_nextn_predict_layers = mtp_depth(c, l);
  p.flops_per_token = flops_per_token(cm, l.seq, cm.num_nextn_predict_layers > 0);
  const double tokens = double(l.gbs * l.seq);
  p.tokens_per_s_per_gpu = tokens / p.step_time_s / double(l.gpus);
  p.tflops_per_gpu = p.flops_per_token * p.tokens_per_s_per_gpu / 1e12;
  p.mfu = p.tflops_per_gpu / (s.peak(gemm_format(l.precision)) / share);
  p.a2a_gb_nvlink = double(m) * slow.a2a_nvl / 1e9;
  p.a2a_gb_scaleout = double(m) * slow.a2a_nic / 1e9;

  p.memory = memory_use(l, s, ranks, held, slow, shard);
  p.memory_gb_per_gpu = p.memory.total();
  p.fits = p.memory_gb_per_gpu <= s.hbm_gb / share;
  return p;
}

std::vector<Prediction> simulate_scaling(const ModelConfig& c, SimLayout l, const SystemSpec& s,
                                         const std::vector<int64_t>& gpus) {
  std::vector<Prediction> out;
  for (int64_t n : gpus) {
    l.gpus = n;
    out.push_back(simulate(c, l, s));
    out.back().efficiency = out.back().tflops_per_gpu / out.front().tflops_per_gpu;
  }
  return out;
}

}  // namespace moet::sim

#include "sim/step_timeline.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace moet::sim {

namespace {

struct Span {
  double a = 0, b = 0;
};

// Where one rank is: when its compute and its exchange are free, the compute interval in
// flight (the exchange's SMs may still slow it), and every interval it ran.
struct RankState {
  double compute_free = 0, exchange_free = 0;
  std::vector<Span> compute, exchange;
  double base = 0, contention = 0;
};

// Compute of `work` seconds starting at `start` while an exchange runs until `until`: at
// (1 − f) of its speed beside the exchange, at full speed after it.
double slowed_end(double start, double work, double until, double f) {
  const double window = std::max(0.0, until - start);
  if (work <= window * (1 - f)) return start + work / (1 - f);
  return start + work + f * window;
}

// Runs one chain, or two side by side (a combined 1F1B pass), from `start`: each op waits for
// the one before it in its chain and for its resource; of the ops that could go next, the one
// that can start first goes (an exchange first on a tie, so compute issued beside it overlaps
// it). Returns each chain's end.
void run_chains(RankState& r, const Chain* a, double ready_a, const Chain* b, double ready_b,
                double f, double& end_a, double& end_b) {
  struct Cursor {
    const Chain* c;
    size_t i = 0;
    double ready = 0;
  };
  Cursor cur[2] = {{a, 0, ready_a}, {b, 0, ready_b}};
  int in_flight = -1;  // cursor whose compute interval is r.compute.back()
  while (true) {
    int pick = -1;
    double best = std::numeric_limits<double>::infinity();
    bool best_x = false;
    for (int k = 0; k < 2; ++k) {
      if (!cur[k].c || cur[k].i >= cur[k].c->size()) continue;
      const Interval& op = (*cur[k].c)[cur[k].i];
      const double s = std::max(cur[k].ready, op.exchange ? r.exchange_free : r.compute_free);
      if (s < best || (s == best && op.exchange && !best_x))
        pick = k, best = s, best_x = op.exchange;
    }
    if (pick < 0) break;
    Cursor& c = cur[pick];
    const Interval& op = (*c.c)[c.i++];
    if (op.s <= 0) continue;
    if (op.exchange) {
      const double end = best + op.s;
      r.exchange.push_back({best, end});
      r.exchange_free = end;
      // the compute in flight beside it now runs slower until it ends
      if (in_flight >= 0 && r.compute.back().b > best) {
        Span& run = r.compute.back();
        const double done = slowed_end(best, run.b - best, end, f);
        r.contention += done - run.b;
        run.b = done;
        r.compute_free = done;
        cur[in_flight].ready = done;
      }
      c.ready = end;
    } else {
      const double until = r.exchange.empty() ? 0 : r.exchange.back().b;
      const double end = slowed_end(best, op.s, until, f);
      r.base += op.s;
      r.contention += end - best - op.s;
      r.compute.push_back({best, end});
      r.compute_free = end;
      in_flight = pick;
      c.ready = end;
    }
  }
  end_a = cur[0].ready;
  end_b = cur[1].ready;
}

// Seconds two sorted lists of disjoint spans have in common.
double overlap(const std::vector<Span>& x, const std::vector<Span>& y) {
  double t = 0;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    t += std::max(0.0, std::min(x[i].b, y[j].b) - std::max(x[i].a, y[j].a));
    (x[i].b < y[j].b) ? ++i : ++j;
  }
  return t;
}

// Rank r's passes. Interleaved schedules are the engine's; with one chunk per rank and paired
// passes, one more warm-up forward (as Megatron's combined 1F1B without interleaving does), so
// that a steady-state forward and the backward after it belong to different micro-batches.
std::vector<PipelinePass> rank_passes(const PipelineScheduleSpec& s, int64_t r, bool pair) {
  if (s.chunks > 1 || !pair || s.kind != PipelineScheduleKind::kInterleaved)
    return pipeline_schedule(s, r);
  const int64_t M = s.microbatches, w = std::min(s.stages - r, M);
  constexpr PassOp F = PassOp::kForward, B = PassOp::kBackward;
  std::vector<PipelinePass> out;
  for (int64_t k = 0; k < w; ++k) out.push_back({F, k, 0});
  for (int64_t k = 0; k < M - w; ++k) out.push_back({F, k + w, 0}), out.push_back({B, k, 0});
  for (int64_t k = M - w; k < M; ++k) out.push_back({B, k, 0});
  return out;
}

// Each virtual stage's chains by pass: forward, the whole backward, and the backward split for
// the zero-bubble schedules — the input gradient keeps every exchange and (1 − share) of each
// compute interval, the weight gradient is share of its compute.
struct StageChains {
  const std::vector<Chain>&fwd, &bwd;
  std::vector<Chain> input, weight;
  StageChains(const std::vector<Chain>& f, const std::vector<Chain>& b, double share,
              const std::vector<double>& copy)
      : fwd(f), bwd(b), input(b.size()), weight(b.size()) {
    for (size_t k = 0; k < b.size(); ++k) {
      double w = 0;
      if (k < copy.size() && copy[k] > 0) input[k].push_back({false, copy[k]});
      for (const Interval& x : b[k]) {
        input[k].push_back({x.exchange, x.exchange ? x.s : x.s * (1 - share)});
        if (!x.exchange) w += x.s * share;
      }
      weight[k] = {{false, w}};
    }
  }
  const Chain* of(PassOp op, int64_t k) const {
    switch (op) {
      case PassOp::kForward:
        return &fwd[size_t(k)];
      case PassOp::kBackward:
        return &bwd[size_t(k)];
      case PassOp::kInputGrad:
        return &input[size_t(k)];
      case PassOp::kWeightGrad:
        break;
    }
    return &weight[size_t(k)];
  }
};

}  // namespace

StepTimeline run_step_timeline(const PipelineScheduleSpec& spec, const std::vector<Chain>& fwd,
                               const std::vector<Chain>& bwd, const TimelineOptions& opt) {
  const int64_t P = spec.stages, V = spec.chunks, M = spec.microbatches, K = P * V;
  MOET_ASSERT(int64_t(fwd.size()) == K && int64_t(bwd.size()) == K);
  std::vector<std::vector<PipelinePass>> lists;
  if (spec.kind == PipelineScheduleKind::kInterleaved)
    for (int64_t r = 0; r < P; ++r) lists.push_back(rank_passes(spec, r, opt.pair_passes));
  else
    lists = pipeline_schedules(spec);
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  const StageChains chains(fwd, bwd, opt.weight_share, opt.input_copy_s);
  std::vector<double> fwd_end(size_t(M * K), kNotYet), bwd_end(size_t(M * K), kNotYet);
  auto at = [&](int64_t m, int64_t stage) { return size_t(m * K + stage); };
  auto stage_of = [&](const PipelinePass& p, int64_t r) {
    return pipeline_stage(spec, r, p.chunk);
  };
  auto ready = [&](const PipelinePass& p, int64_t r) {
    const int64_t k = stage_of(p, r);
    if (p.forward()) return k == 0 ? 0.0 : fwd_end[at(p.microbatch, k - 1)] + opt.p2p_s;
    if (p.op == PassOp::kWeightGrad) return bwd_end[at(p.microbatch, k)];
    const double hop = k < K - 1 && pipeline_place(spec, k + 1).rank == r ? 0.0 : opt.p2p_s;
    return k == K - 1 ? fwd_end[at(p.microbatch, k)] : bwd_end[at(p.microbatch, k + 1)] + hop;
  };
  auto chain = [&](const PipelinePass& p, int64_t r) { return chains.of(p.op, stage_of(p, r)); };
  auto finish = [&](const PipelinePass& p, int64_t r, double end) {
    if (p.forward()) fwd_end[at(p.microbatch, stage_of(p, r))] = end;
    if (p.input_grad()) bwd_end[at(p.microbatch, stage_of(p, r))] = end;
  };
  std::vector<RankState> state(static_cast<size_t>(P));
  std::vector<size_t> next(size_t(P), 0);
  size_t done = 0, all = 0;
  for (const auto& l : lists) all += l.size();
  bool unpair = false;  // set when only running a paired forward alone lets the step go on
  while (done < all) {
    bool progressed = false;
    for (int64_t r = 0; r < P; ++r) {
      const std::vector<PipelinePass>& list = lists[size_t(r)];
      size_t& i = next[size_t(r)];
      RankState& st = state[size_t(r)];
      while (i < list.size()) {
        const PipelinePass& p = list[i];
        const double rp = ready(p, r);
        if (rp == kNotYet) break;  // waits for another rank
        // combined 1F1B pairs a steady-state forward with the backward after it; DualPipeV's
        // list names its overlapped pairs
        const bool pairable = opt.pair_passes &&
                              (spec.kind == PipelineScheduleKind::kInterleaved
                                   ? p.forward() && i + 1 < list.size() && !list[i + 1].forward() &&
                                         list[i + 1].microbatch != p.microbatch
                                   : p.overlapped);
        double end_a = 0, end_b = 0;
        if (pairable) {
          const PipelinePass& q = list[i + 1];
          const double rq = ready(q, r);
          if (rq == kNotYet && !unpair) break;
          if (rq != kNotYet) {
            const double start = st.compute_free;
            run_chains(st, chain(p, r), std::max(rp, start), chain(q, r), std::max(rq, start),
                       opt.sm_fraction, end_a, end_b);
            finish(p, r, end_a), finish(q, r, end_b);
            st.compute_free = st.exchange_free = std::max(end_a, end_b);
            i += 2, done += 2, progressed = true, unpair = false;
            continue;
          }
        }
        const double start = std::max(rp, std::max(st.compute_free, st.exchange_free));
        const Chain* c = chain(p, r);
        run_chains(st, c, start, opt.two_lanes ? c : nullptr, start, opt.sm_fraction, end_a, end_b);
        end_a = std::max(end_a, opt.two_lanes ? end_b : end_a);
        finish(p, r, end_a);
        st.compute_free = st.exchange_free = end_a;
        ++i, ++done, progressed = true, unpair = false;
      }
    }
    if (!progressed) {
      MOET_CHECK(!unpair, "pipeline schedule deadlocks (P ", P, ", V ", V, ", M ", M, ")");
      unpair = true;
    }
  }
  StepTimeline t;
  for (const RankState& st : state)
    t.step_s = std::max(t.step_s, std::max(st.compute_free, st.exchange_free));
  for (RankState& st : state) {
    RankTimeline rt;
    rt.compute = st.base, rt.contention = st.contention;
    for (const Span& x : st.exchange) rt.exchange += x.b - x.a;
    std::sort(st.compute.begin(), st.compute.end(), [](Span x, Span y) { return x.a < y.a; });
    rt.exposed = rt.exchange - overlap(st.compute, st.exchange);
    rt.idle = std::max(0.0, t.step_s - rt.busy());
    t.ranks.push_back(rt);
  }
  return t;
}

}  // namespace moet::sim

#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/enum_table.h"
#include "core/error.h"

namespace moet {

namespace {

struct ScheduleName {
  PipelineScheduleKind kind;
  const char* name;
  const char* other;  // TorchTitan's / PyTorch's
};
constexpr ScheduleName kScheduleNames[] = {
    {PipelineScheduleKind::kInterleaved, "interleaved", "Interleaved1F1B"},
    {PipelineScheduleKind::k1F1B, "1f1b", "1F1B"},
    {PipelineScheduleKind::kZB1P, "zb1p", "InterleavedZeroBubble"},
    {PipelineScheduleKind::kZBV, "zbv", "ZBVZeroBubble"},
    {PipelineScheduleKind::kDualPipeV, "dualpipev", "DualPipeV"},
};
static_assert(rows_in_enum_order(kScheduleNames, &ScheduleName::kind));

}  // namespace

PipelineScheduleKind parse_pipeline_schedule(const std::string& name) {
  for (const ScheduleName& n : kScheduleNames)
    if (name == n.name || name == n.other) return n.kind;
  throw Error("--pipeline-schedule: unknown schedule '" + name +
              "': use 1f1b, interleaved, zb1p, zbv or dualpipev (or TorchTitan's 1F1B, "
              "Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)");
}

const std::vector<std::pair<std::string, PipelineScheduleKind>>& pipeline_schedule_choices() {
  static const std::vector<std::pair<std::string, PipelineScheduleKind>> c = [] {
    std::vector<std::pair<std::string, PipelineScheduleKind>> v;
    for (const ScheduleName& n : kScheduleNames) v.emplace_back(n.name, n.kind);
    for (const ScheduleName& n : kScheduleNames) v.emplace_back(n.other, n.kind);
    return v;
  }();
  return c;
}

const char* pipeline_schedule_name(PipelineScheduleKind k) {
  return kScheduleNames[size_t(k)].name;
}

std::string to_string(const PipelinePass& p) {
  static constexpr char kOp[] = {'F', 'B', 'I', 'W'};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%c%lld.%lld", kOp[size_t(p.op)], (long long)p.microbatch,
                (long long)p.chunk);
  return buf;
}

int64_t pipeline_stage(const PipelineScheduleSpec& s, int64_t rank, int64_t chunk) {
  if (is_v_schedule(s.kind)) return chunk == 0 ? rank : 2 * s.stages - 1 - rank;
  return chunk * s.stages + rank;
}

StagePlace pipeline_place(const PipelineScheduleSpec& s, int64_t stage) {
  const int64_t P = s.stages;
  if (is_v_schedule(s.kind))
    return stage < P ? StagePlace{stage, 0} : StagePlace{2 * P - 1 - stage, 1};
  return {stage % P, stage / P};
}

void check_pipeline_schedule(const PipelineScheduleSpec& s) {
  MOET_CHECK(s.stages >= 1, "--pp must be >= 1, got ", s.stages);
  MOET_CHECK(s.chunks >= 1, "--vpp must be >= 1, got ", s.chunks);
  MOET_CHECK(s.microbatches >= 1, "--grad-accum (micro-batches per step) must be >= 1, got ",
             s.microbatches);
  MOET_CHECK(s.group >= 0, "the micro-batch group per virtual stage must be >= 0, got ", s.group);
  const char* name = pipeline_schedule_name(s.kind);
  switch (s.kind) {
    case PipelineScheduleKind::k1F1B:
    case PipelineScheduleKind::kZB1P:
      MOET_CHECK(s.chunks == 1, "--pipeline-schedule ", name,
                 " runs one model chunk per rank: drop --vpp ", s.chunks,
                 " (or use interleaved, or zbv / dualpipev for two chunks in a V)");
      MOET_CHECK(!s.ep_overlap || s.kind == PipelineScheduleKind::k1F1B, "--pipeline-schedule ",
                 name,
                 " has no combined 1F1B passes: drop --a2a-overlap, or use dualpipev, "
                 "whose overlapped pairs hide the all-to-all");
      return;
    case PipelineScheduleKind::kZBV:
    case PipelineScheduleKind::kDualPipeV:
      MOET_CHECK(s.chunks == 2, "--pipeline-schedule ", name,
                 " puts two model chunks on each rank in a V (stages r and 2P-1-r): --vpp must "
                 "be 2 or left out, got ",
                 s.chunks);
      MOET_CHECK(s.kind != PipelineScheduleKind::kDualPipeV || s.microbatches >= 2 * s.stages,
                 "--pipeline-schedule dualpipev needs at least 2 x --pp = ", 2 * s.stages,
                 " micro-batches per step (DeepSeek's rule), got ", s.microbatches,
                 ": raise --grad-accum, or use zbv");
      MOET_CHECK(!s.ep_overlap || s.kind == PipelineScheduleKind::kDualPipeV,
                 "--pipeline-schedule zbv has no overlapped passes: drop --a2a-overlap, or use "
                 "dualpipev, whose overlapped pairs hide the all-to-all");
      return;
    case PipelineScheduleKind::kInterleaved:
      break;
  }
  if (s.chunks == 1) return;
  MOET_CHECK(s.stages >= 2, "--vpp ", s.chunks, " interleaves pipeline stages: it needs --pp >= 2");
  const int64_t N = s.group_size();
  MOET_CHECK(s.stages <= N && N <= s.microbatches,
             "interleaved 1F1B takes micro-batches in groups of ", N,
             " per virtual stage, which must lie in [--pp, --grad-accum] = [", s.stages, ", ",
             s.microbatches, "] (Megatron's rule): use --grad-accum >= ", std::max(s.stages, N));
  const int64_t last = s.microbatches % N;
  MOET_CHECK(last == 0 || last >= s.stages, "interleaved 1F1B: the last group of micro-batches (",
             s.microbatches, " mod ", N, " = ", last, ") must be empty or hold at least --pp ",
             s.stages, " (Megatron's rule; otherwise the passes wait on each other in a cycle)");
}

int64_t pipeline_warmup_passes(const PipelineScheduleSpec& s, int64_t rank) {
  if (s.kind != PipelineScheduleKind::kInterleaved && s.kind != PipelineScheduleKind::k1F1B) {
    int64_t n = 0;  // the forwards before the first backward pass of any kind
    for (const PipelinePass& p : pipeline_schedule(s, rank)) {
      if (!p.forward()) break;
      ++n;
    }
    return n;
  }
  const int64_t P = s.stages, V = s.chunks, M = s.microbatches;
  if (V == 1) return std::min(P - rank - 1, M);
  int64_t w = 2 * (P - rank - 1) + (V - 1) * s.group_size();
  if (s.ep_overlap) w += 1;
  return std::min(w, M * V);
}

namespace {

// Megatron's schedule table: for each group of N micro-batches, every chunk in order over the
// group's micro-batches (the last group takes what is left).
std::vector<PipelinePass> forward_table(const PipelineScheduleSpec& s) {
  const int64_t M = s.microbatches, V = s.chunks, N = s.group_size();
  std::vector<PipelinePass> t;
  for (int64_t first = 0; first < M; first += N) {
    const int64_t end = first + N >= M ? M : first + N;
    for (int64_t c = 0; c < V; ++c)
      for (int64_t m = first; m < end; ++m) t.push_back({PassOp::kForward, m, c});
  }
  return t;
}

std::vector<PipelinePass> interleaved_schedule(const PipelineScheduleSpec& s, int64_t rank) {
  const int64_t V = s.chunks, total = s.microbatches * V;
  const std::vector<PipelinePass> table = forward_table(s);
  // The k-th backward is the table's k-th entry with the chunks reversed.
  auto fwd = [&](int64_t k) { return table[size_t(k)]; };
  auto bwd = [&](int64_t k) {
    PipelinePass p = table[size_t(k)];
    return PipelinePass{PassOp::kBackward, p.microbatch, V - 1 - p.chunk};
  };
  const int64_t warmup = pipeline_warmup_passes(s, rank);
  std::vector<PipelinePass> out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (int64_t k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
    out.push_back(fwd(k + warmup));
    out.push_back(bwd(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

// ZB-H1: 1F1B's forwards and backwards (as I) in 1F1B's order on every rank; a W (oldest first)
// runs where the rank would otherwise wait, or where a forward would hold more than P
// micro-batches' activations; the rest after the last I. Where the waits fall is found by running
// the lists with unit pass times and no transfer time, so the list is a pure function of (P, M).
std::vector<std::vector<PipelinePass>> zb1p_schedules(const PipelineScheduleSpec& s) {
  const int64_t P = s.stages, M = s.microbatches;
  PipelineScheduleSpec plain = s;
  plain.kind = PipelineScheduleKind::k1F1B;
  std::vector<std::vector<PipelinePass>> base(static_cast<size_t>(P)), out(static_cast<size_t>(P));
  for (int64_t r = 0; r < P; ++r) {
    base[size_t(r)] = interleaved_schedule(plain, r);
    for (PipelinePass& p : base[size_t(r)])
      if (!p.forward()) p.op = PassOp::kInputGrad;
  }
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  std::vector<double> fwd_end(size_t(M * P), kNotYet), in_end(size_t(M * P), kNotYet);
  std::vector<double> free_at(size_t(P), 0.0);
  std::vector<size_t> next(size_t(P), 0);
  std::vector<std::vector<int64_t>> pending(static_cast<size_t>(P));  // micro-batches whose W waits
  std::vector<int64_t> held(size_t(P), 0);  // forwards whose W is not done
  auto ready = [&](int64_t r, const PipelinePass& p) {
    const size_t at = size_t(p.microbatch * P + r);
    if (p.forward()) return r == 0 ? 0.0 : fwd_end[at - 1];
    return r == P - 1 ? fwd_end[at] : in_end[at + 1];
  };
  auto run_w = [&](int64_t r) {
    std::vector<int64_t>& q = pending[size_t(r)];
    out[size_t(r)].push_back({PassOp::kWeightGrad, q.front(), 0});
    q.erase(q.begin());
    free_at[size_t(r)] += 1.0;
    --held[size_t(r)];
  };
  // One pass at a time: of the ranks that can act, the one free first (the lower rank on a tie)
  // runs its next pass, or a W.
  std::vector<char> tried(static_cast<size_t>(P));
  for (bool progressed = true; progressed;) {
    progressed = false;
    std::fill(tried.begin(), tried.end(), 0);
    for (int64_t k = 0; k < P && !progressed; ++k) {
      int64_t r = -1;  // the untried rank free first
      for (int64_t q = 0; q < P; ++q)
        if (!tried[size_t(q)] && (r < 0 || free_at[size_t(q)] < free_at[size_t(r)])) r = q;
      tried[size_t(r)] = 1;
      if (next[size_t(r)] >= base[size_t(r)].size()) continue;
      const PipelinePass p = base[size_t(r)][next[size_t(r)]];
      const double rp = ready(r, p);
      const bool full = p.forward() && held[size_t(r)] >= P;
      if ((rp > free_at[size_t(r)] || full) && !pending[size_t(r)].empty()) {
        run_w(r);
        progressed = true;
        continue;
      }
      if (rp == kNotYet) continue;
      const double end = std::max(rp, free_at[size_t(r)]) + 1.0;
      (p.forward() ? fwd_end : in_end)[size_t(p.microbatch * P + r)] = end;
      free_at[size_t(r)] = end;
      if (p.forward()) {
        ++held[size_t(r)];
      } else {
        pending[size_t(r)].push_back(p.microbatch);
      }
      out[size_t(r)].push_back(p);
      ++next[size_t(r)];
      progressed = true;
    }
  }
  for (int64_t r = 0; r < P; ++r) {
    MOET_ASSERT(next[size_t(r)] == base[size_t(r)].size());
    while (!pending[size_t(r)].empty()) run_w(r);
  }
  return out;
}

// ZB-V (section 6 of the zero-bubble paper; the order torch.distributed.pipelining's
// ScheduleZBVZeroBubble gives): on rank r, with n = max(M, 2P − 1) micro-batches planned and the
// ones past M left out,
//   2(P − r) − 1 forwards of chunk 0; r × (F chunk 1, F chunk 0); P − r × (F1 I1 W1);
//   the steady state (F0) I0 W0 F1 I1 W1 until every forward ran;
//   r × (I0 I1); P − r × (I0, the oldest W0); the W1 left; the W0 left.
std::vector<PipelinePass> zbv_schedule(const PipelineScheduleSpec& s, int64_t r) {
  const int64_t P = s.stages, M = s.microbatches, n = std::max(M, 2 * P - 1);
  int64_t f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
  std::vector<PipelinePass> out;
  auto add = [&](PassOp op, int64_t c) {
    int64_t& k = op == PassOp::kForward ? f[c] : op == PassOp::kInputGrad ? b[c] : w[c];
    out.push_back({op, k++, c});
  };
  for (int64_t i = 0; i < 2 * (P - r) - 1; ++i) add(PassOp::kForward, 0);
  for (int64_t i = 0; i < r; ++i) add(PassOp::kForward, 1), add(PassOp::kForward, 0);
  for (int64_t i = 0; i < P - r; ++i)
    add(PassOp::kForward, 1), add(PassOp::kInputGrad, 1), add(PassOp::kWeightGrad, 1);
  while (f[1] < f[0] || f[0] < n) {
    if (f[0] < n) add(PassOp::kForward, 0);
    add(PassOp::kInputGrad, 0), add(PassOp::kWeightGrad, 0);
    add(PassOp::kForward, 1), add(PassOp::kInputGrad, 1), add(PassOp::kWeightGrad, 1);
  }
  for (int64_t i = 0; i < r; ++i) add(PassOp::kInputGrad, 0), add(PassOp::kInputGrad, 1);
  for (int64_t i = 0; i < P - r; ++i) add(PassOp::kInputGrad, 0), add(PassOp::kWeightGrad, 0);
  while (w[1] < b[1]) add(PassOp::kWeightGrad, 1);
  while (w[0] < b[0]) add(PassOp::kWeightGrad, 0);
  MOET_ASSERT(f[0] == n && f[1] == n && b[0] == n && b[1] == n && w[0] == n && w[1] == n);
  std::vector<PipelinePass> kept;
  for (const PipelinePass& p : out)
    if (p.microbatch < M) kept.push_back(p);
  return kept;
}

// DualPipeV (deepseek-ai/DualPipe, dualpipev.py), rank r of P, M ≥ 2P micro-batches; each
// chunk's passes of one kind go in micro-batch order, W's in the order of their I's:
//   1. 2(P − r − 1) × F0           2. r + 1 × (F0 F1)         3. P − r − 1 × (I1, a W, F1)
//   4. M − 2P + r + 1 × (F0&B1, F1&B0) — the first F0, B1 of the last rank not overlapped
//   5. P − r − 1 × (B1, F1&B0)     6. r + 1 × (B1 B0), I in place of B from the middle on
//   7. P − r − 1 × (a W, I0)       8. r + 1 × a W
std::vector<PipelinePass> dualpipev_schedule(const PipelineScheduleSpec& s, int64_t r) {
  const int64_t P = s.stages, M = s.microbatches;
  int64_t f[2] = {0, 0}, b[2] = {0, 0};
  std::vector<std::pair<int64_t, int64_t>> wq;  // (chunk, micro-batch) of the I's waiting for W
  std::vector<PipelinePass> out;
  auto fwd = [&](int64_t c) { out.push_back({PassOp::kForward, f[c]++, c}); };
  auto bwd = [&](int64_t c, bool split) {
    const int64_t m = b[c]++;
    out.push_back({split ? PassOp::kInputGrad : PassOp::kBackward, m, c});
    if (split) wq.emplace_back(c, m);
  };
  auto weight = [&] {
    if (wq.empty()) return;
    out.push_back({PassOp::kWeightGrad, wq.front().second, wq.front().first});
    wq.erase(wq.begin());
  };
  auto pair = [&](int64_t fc, int64_t bc) {
    fwd(fc);
    out.back().overlapped = true;
    bwd(bc, false);
  };
  for (int64_t i = 0; i < 2 * (P - r - 1); ++i) fwd(0);
  for (int64_t i = 0; i < r + 1; ++i) fwd(0), fwd(1);
  for (int64_t i = 0; i < P - r - 1; ++i) bwd(1, true), weight(), fwd(1);
  for (int64_t i = 0; i < M - 2 * P + r + 1; ++i) {
    if (i == 0 && r == P - 1) {
      fwd(0), bwd(1, false);
    } else {
      pair(0, 1);
    }
    pair(1, 0);
  }
  for (int64_t i = 0; i < P - r - 1; ++i) bwd(1, false), pair(1, 0);
  const int64_t step6 = r + 1;
  bool zb = false;
  for (int64_t i = 0; i < step6; ++i) {
    if (i == step6 / 2 && r % 2 == 1) zb = true;
    bwd(1, zb);
    if (i == step6 / 2 && r % 2 == 0) zb = true;
    bwd(0, zb);
  }
  for (int64_t i = 0; i < P - r - 1; ++i) weight(), bwd(0, true);
  for (int64_t i = 0; i < r + 1; ++i) weight();
  MOET_ASSERT(wq.empty() && f[0] == M && f[1] == M && b[0] == M && b[1] == M);
  return out;
}

}  // namespace

std::vector<PipelinePass> pipeline_schedule(const PipelineScheduleSpec& s, int64_t rank) {
  check_pipeline_schedule(s);
  MOET_ASSERT(rank >= 0 && rank < s.stages);
  switch (s.kind) {
    case PipelineScheduleKind::kZB1P:
      return zb1p_schedules(s)[size_t(rank)];
    case PipelineScheduleKind::kZBV:
      return zbv_schedule(s, rank);
    case PipelineScheduleKind::kDualPipeV:
      return dualpipev_schedule(s, rank);
    case PipelineScheduleKind::kInterleaved:
    case PipelineScheduleKind::k1F1B:
      break;
  }
  return interleaved_schedule(s, rank);
}

std::vector<std::vector<PipelinePass>> pipeline_schedules(const PipelineScheduleSpec& s) {
  check_pipeline_schedule(s);
  if (s.kind == PipelineScheduleKind::kZB1P) return zb1p_schedules(s);
  std::vector<std::vector<PipelinePass>> all;
  for (int64_t r = 0; r < s.stages; ++r) all.push_back(pipeline_schedule(s, r));
  return all;
}

PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double p2p_s, double weight_share) {
  const size_t K = size_t(s.stages * s.chunks);
  return simulate_pipeline(s, std::vector<double>(K, forward_s), std::vector<double>(K, backward_s),
                           p2p_s, weight_share);
}

PipelineTiming simulate_pipeline(const PipelineScheduleSpec& s,
                                 const std::vector<double>& forward_s,
                                 const std::vector<double>& backward_s, double p2p_s,
                                 double weight_share) {
  const int64_t P = s.stages, V = s.chunks, M = s.microbatches, K = P * V;
  MOET_ASSERT(int64_t(forward_s.size()) == K && int64_t(backward_s.size()) == K);
  const std::vector<std::vector<PipelinePass>> lists = pipeline_schedules(s);
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  // end time of the forward / the input gradient of (micro-batch, virtual stage)
  std::vector<double> fwd_end(size_t(M * K), kNotYet), bwd_end(size_t(M * K), kNotYet);
  auto at = [&](int64_t m, int64_t stage) { return size_t(m * K + stage); };
  auto stage_of = [&](const PipelinePass& p, int64_t r) { return pipeline_stage(s, r, p.chunk); };
  auto ready = [&](const PipelinePass& p, int64_t r) {
    const int64_t k = stage_of(p, r);
    if (p.forward()) return k == 0 ? 0.0 : fwd_end[at(p.microbatch, k - 1)] + p2p_s;
    if (p.op == PassOp::kWeightGrad) return bwd_end[at(p.microbatch, k)];
    // the hop is free between two stages on one rank (the V's turn)
    const double hop = k < K - 1 && pipeline_place(s, k + 1).rank == r ? 0.0 : p2p_s;
    return k == K - 1 ? fwd_end[at(p.microbatch, k)] : bwd_end[at(p.microbatch, k + 1)] + hop;
  };
  auto cost = [&](const PipelinePass& p, int64_t r) {
    const size_t k = size_t(stage_of(p, r));
    switch (p.op) {
      case PassOp::kForward:
        return forward_s[k];
      case PassOp::kBackward:
        return backward_s[k];
      case PassOp::kInputGrad:
        return backward_s[k] * (1 - weight_share);
      case PassOp::kWeightGrad:
        return backward_s[k] * weight_share;
    }
    return 0.0;
  };
  auto finish = [&](const PipelinePass& p, int64_t r, double end) {
    if (p.forward()) fwd_end[at(p.microbatch, stage_of(p, r))] = end;
    if (p.input_grad()) bwd_end[at(p.microbatch, stage_of(p, r))] = end;
  };
  std::vector<size_t> next(size_t(P), 0);
  std::vector<double> free_at(size_t(P), 0.0), busy(size_t(P), 0.0);
  std::vector<int64_t> in_flight(size_t(P), 0);
  PipelineTiming t;
  t.max_in_flight.assign(size_t(P), 0);
  size_t done = 0, all = 0;
  for (const auto& l : lists) all += l.size();
  auto count = [&](const PipelinePass& p, int64_t r) {
    int64_t& n = in_flight[size_t(r)];
    n += p.forward() ? 1 : p.releases() ? -1 : 0;
    t.max_in_flight[size_t(r)] = std::max(t.max_in_flight[size_t(r)], n);
    busy[size_t(r)] += cost(p, r);
    ++next[size_t(r)];
    ++done;
  };
  while (done < all) {
    bool progressed = false;
    for (int64_t r = 0; r < P; ++r) {
      const std::vector<PipelinePass>& list = lists[size_t(r)];
      while (next[size_t(r)] < list.size()) {
        const PipelinePass& p = list[next[size_t(r)]];
        double ready_at = ready(p, r);
        const PipelinePass* q = p.overlapped ? &list[next[size_t(r)] + 1] : nullptr;
        if (q) ready_at = std::max(ready_at, ready(*q, r));
        if (ready_at == kNotYet) break;  // waits for another rank
        const double start = std::max(ready_at, free_at[size_t(r)]);
        const double end = start + cost(p, r) + (q ? cost(*q, r) : 0.0);
        finish(p, r, end);
        count(p, r);
        if (q) finish(*q, r, end), count(*q, r);
        free_at[size_t(r)] = end;
        progressed = true;
      }
    }
    MOET_CHECK(progressed, "pipeline schedule deadlocks (", pipeline_schedule_name(s.kind), ", P ",
               P, ", V ", V, ", M ", M, ")");
  }
  t.step_s = *std::max_element(free_at.begin(), free_at.end());
  t.ideal_s = *std::max_element(busy.begin(), busy.end());
  for (int64_t r = 0; r < P; ++r) t.idle_s.push_back(t.step_s - busy[size_t(r)]);
  t.bubble_fraction = t.ideal_s > 0 ? t.step_s / t.ideal_s - 1.0 : 0.0;
  return t;
}

double pipeline_bubble_formula_s(const PipelineScheduleSpec& s, double forward_s, double backward_s,
                                 double weight_s) {
  const double P = double(s.stages), F = forward_s, B = backward_s, W = weight_s;
  switch (s.kind) {
    case PipelineScheduleKind::k1F1B:
      return (P - 1) * (F + B);
    case PipelineScheduleKind::kInterleaved:
      return s.chunks == 1 ? (P - 1) * (F + B) : 0.0;
    case PipelineScheduleKind::kZB1P:
      return (P - 1) * (F + B - 2 * W);
    case PipelineScheduleKind::kDualPipeV:
      return (P - 1) * ((F + B) + B - 3 * W);
    case PipelineScheduleKind::kZBV:
      return 0.0;
  }
  return 0.0;
}

}  // namespace moet

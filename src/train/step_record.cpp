#include "train/step_record.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "metrics/flops.h"
#include "metrics/memory.h"
#include "model/config.h"
#include "model/moe_layer.h"
#include "parallel/communicator.h"
#include "parallel/pipeline_schedule.h"
#include "train/parallelize.h"
#include "train/train_options.h"

namespace moet {

StepRecorder::StepRecorder(const TrainOptions& o, const ModelConfig& cfg, ParallelRun& par,
                           Communicator* world, double peak_tflops)
    : o_(o),
      cfg_(cfg),
      par_(par),
      world_(world),
      ranks_(world ? world->size() : 1),
      peak_tflops_(peak_tflops),
      flops_per_token_(moet::flops_per_token(cfg, o.data.seq, cfg.num_nextn_predict_layers > 0)),
      tokens_per_step_(int64_t(par.dp) * o.data.grad_accum * o.data.micro_batch * o.data.seq) {
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.is_moe_layer(l)) moe_layer_index_.push_back(l);
  if (cfg.mtp_is_moe())
    for (int64_t k = 0; k < cfg.num_nextn_predict_layers; ++k)
      moe_layer_index_.push_back(cfg.num_hidden_layers + k);
}

StepMetrics StepRecorder::record(int64_t step, const StepResult& r, double step_s,
                                 double data_wait_s, double elapsed_s, int64_t first_step) {
  StepMetrics m;
  m.step = step + 1;
  m.total_steps = o_.optim.steps;
  m.ranks = ranks_;
  m.loss = r.losses.loss;
  m.lm_loss = r.losses.lm_loss;
  if (cfg_.num_nextn_predict_layers > 0)
    m.mtp_loss = r.losses.mtp_loss / double(cfg_.num_nextn_predict_layers);
  if (cfg_.num_moe_layers() > 0) {
    m.balance_loss = r.losses.balance_loss;
    m.z_loss = r.losses.z_loss;
    m.max_expert_load = r.max_expert_load;
    if (!r.balance_loss_per_layer.empty()) {  // global, every layer (StepRunner::run)
      MOET_ASSERT(r.balance_loss_per_layer.size() == moe_layer_index_.size());
      m.balance_loss_layers = moe_layer_index_;
      m.balance_loss_per_layer.assign(r.balance_loss_per_layer.begin(),
                                      r.balance_loss_per_layer.end());
    }
    // the step's loads, summed over micro-batches and ranks (StepRunner::run), and the biases
    // they updated (the same on every rank)
    if (o_.logging.log_expert_load > 0 && (step + 1) % o_.logging.log_expert_load == 0) {
      m.expert_load_layers = moe_layer_index_;
      for (MoeLayer* layer : par_.moe_layers()) {
        m.expert_load.push_back(layer->stats().load_E);
        const Tensor& b = layer->correction_bias()->value;
        m.expert_bias.emplace_back(b.f32(), b.f32() + b.numel());
      }
      MOET_ASSERT(m.expert_load.size() == moe_layer_index_.size());
    }
  }
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.tokens_per_s = double(tokens_per_step_) / step_s;
  m.tflops = model_tflops(flops_per_token_, double(tokens_per_step_), step_s, ranks_);
  m.mfu = m.tflops / peak_tflops_;
  m.tokens = (step + 1) * tokens_per_step_;
  m.step_time_s = step_s;
  m.data_wait_s = data_wait_s;
  if (par_.dp_sync) communication(m);
  if (par_.pipeline) pipeline(m);
  m.elapsed_s = elapsed_s;
  m.peak_rss_mb = double(peak_rss_bytes()) / 1048576.0;
  m.eta_s = m.elapsed_s / double(step + 1 - first_step) * double(o_.optim.steps - step - 1);
  return m;
}

// The expert exchanges' and the gradient sync's seconds and bytes, taken and reset.
void StepRecorder::communication(StepMetrics& m) {
  DataParallel& dp = *par_.dp_sync;
  double a2a_s = 0, a2a_exposed = 0, bytes = 0, other_nodes = 0, grad_exposed = 0;
  double rows_max = 0, rows_mean = 0;
  for (ExpertExchangeDispatcher* d : par_.exchanges) {
    const auto [mx, mean] = d->rows_received_max_mean();
    rows_max += mx, rows_mean += mean;
    a2a_s += d->a2a_seconds();
    a2a_exposed += d->exposed_seconds();
    bytes += double(d->bytes_sent());
    other_nodes += double(d->bytes_sent_other_nodes());
    d->reset_timers();
    d->reset_bytes();
  }
  if (o_.parallel.ep_ranks_per_node > 0) m.comm_bytes_other_nodes = other_nodes;
  m.grad_sync_s = dp.take_sync_seconds(&grad_exposed);
  m.a2a_s = a2a_s;
  m.exposed_comm_s = a2a_exposed + grad_exposed;
  m.a2a_exposed_s = a2a_exposed;
  m.grad_sync_bytes = double(dp.take_sync_bytes());
  m.comm_bytes = bytes + m.grad_sync_bytes;
  if (CommunicatorTpGroup* tp = par_.tp_collectives.get()) {
    m.tp_comm_s = tp->take_seconds();
    m.tp_bytes = double(tp->take_bytes());
    m.comm_bytes += m.tp_bytes;
  }
  if (rows_mean > 0) m.ep_load_imbalance = rows_max / rows_mean;
}

// --pp: every rank's pass times, the bubble they make, each rank's idle time beside the
// schedule's formula from the mean pass times, the schedule's prediction from them and the
// bytes sent between stages.
void StepRecorder::pipeline(StepMetrics& m) {
  Communicator& world = *world_;
  const PipelineExecutor::StepTimes& t = par_.pipeline->last_step_times();
  const PipelineScheduleSpec& spec = par_.pipeline->spec();
  constexpr int64_t kFixed = 13;  // below, before the per-chunk times
  const int64_t V = spec.chunks, P = spec.stages, n = kFixed + 2 * V;
  std::vector<double> mine{t.run_s,         t.wait_s, double(t.sent_bytes), t.f.s,
                           double(t.f.n),   t.b.s,    double(t.b.n),        t.i.s,
                           double(t.i.n),   t.w.s,    double(t.w.n),        t.pair.s,
                           double(t.pair.n)};
  MOET_ASSERT(int64_t(mine.size()) == kFixed);
  mine.insert(mine.end(), t.forward_s.begin(), t.forward_s.end());
  mine.insert(mine.end(), t.backward_s.begin(), t.backward_s.end());
  std::vector<double> all(static_cast<size_t>(n * world.size()));
  world.allgather(mine.data(), n * int64_t(sizeof(double)), all.data());
  double run = 0, busy = 0, sent = 0;
  double kinds[10] = {};  // f, b, i, w, pair: seconds and counts over the stages
  for (int r = 0; r < world.size(); ++r) sent += all[size_t(r * n + 2)];
  std::vector<double> f(size_t(P * V)), b(size_t(P * V)), compute(static_cast<size_t>(P));
  for (int64_t r = 0; r < P; ++r) {
    // the stage's first rank (data-parallel and tensor-parallel rank 0)
    const double* x = all.data() + r * par_.dp * par_.tp * n;
    run = std::max(run, x[0]);
    for (int k = 0; k < 10; ++k) kinds[k] += x[3 + k];
    for (int64_t c = 0; c < V; ++c) {
      const size_t k = size_t(pipeline_stage(spec, r, c));
      f[k] = x[kFixed + c] / double(spec.microbatches);
      b[k] = x[kFixed + V + c] / double(spec.microbatches);
      compute[size_t(r)] += x[kFixed + c] + x[kFixed + V + c];
    }
    busy = std::max(busy, compute[size_t(r)]);
  }
  m.pp_run_s = run;
  m.pp_bubble = busy > 0 ? run / busy - 1 : 0;
  m.pp_bytes = sent;
  m.comm_bytes = (std::isfinite(m.comm_bytes) ? m.comm_bytes : 0.0) + all[2];  // rank 0's
  if (!spec.ep_overlap)  // combined passes have no separate forward and backward times
    m.pp_schedule_s = simulate_pipeline(spec, f, b).step_s;
  m.pp_idle_s.clear();
  for (int64_t r = 0; r < P; ++r) m.pp_idle_s.push_back(std::max(0.0, run - compute[size_t(r)]));
  // the mean pass of one virtual stage: F; B a whole backward (B, or I + its W); W
  const double nf = kinds[1], nb = kinds[3] + kinds[5], nw = kinds[7];
  if (nf > 0 && nb > 0) {
    m.pp_forward_s = kinds[0] / nf;
    m.pp_backward_s = (kinds[2] + kinds[4] + kinds[6]) / nb;
    m.pp_weight_s = nw > 0 ? kinds[6] / nw : 0.0;
    const double formula =
        pipeline_bubble_formula_s(spec, m.pp_forward_s, m.pp_backward_s, m.pp_weight_s);
    if (formula > 0 && !(spec.ep_overlap && !is_v_schedule(spec.kind)))
      m.pp_idle_formula_s = formula;
  }
}

void StepRecorder::forget_exchanges() {
  for (ExpertExchangeDispatcher* d : par_.exchanges) d->reset_timers(), d->reset_bytes();
  if (CommunicatorTpGroup* tp = par_.tp_collectives.get()) tp->take_seconds(), tp->take_bytes();
}

}  // namespace moet

#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/trace.h"
#include "data/dataset.h"
#include "data/open_dataset.h"
#include "data/prefetch.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "measure/gemm_peak.h"
#include "metrics/flops.h"
#include "metrics/memory.h"
#include "metrics/progress.h"
#include "metrics/tensorboard.h"
#include "model/model.h"
#include "optim/expert_bias.h"
#include "parallel/allgather_dispatcher.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/comm_stream.h"
#include "parallel/data_parallel.h"
#include "train/checkpointing.h"
#include "train/evaluation.h"
#include "train/parallelize.h"
#include "train/run_header.h"
#include "train/run_info.h"
#include "train/setup_agreement.h"
#include "train/stop_signal.h"
#include "train/train_options_check.h"
#include "train/train_step.h"

namespace moet {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Mean held-out LM loss over batches of B sequences (run model.micro_batch() at a time, or
// through the pipeline); under data parallelism data-parallel rank r evaluates batches r,
// r + W, … and the means are averaged over ranks (every rank takes part in the experts'
// all-to-alls; under --pp only the last stage has a loss, the others add 0).
double evaluate(ParallelRun& par, int64_t B, const TokenDataset& ds, int64_t batches,
                std::vector<int32_t>& buf, Communicator* world) {
  Model& model = par.model();
  const int64_t T = model.seq_len(), chunk = model.micro_batch(), chunks = B / chunk;
  const int64_t W = par.dp, r = par.dp_rank;
  batches = std::min(batches, ds.num_eval_batches(B, T) / W);
  if (!ds.has_eval() || batches <= 0) return StepMetrics::kNone;
  double sum = 0;
  const std::function<const int32_t*(int64_t)> part = [&](int64_t c) {
    return buf.data() + c * chunk * (T + 1);
  };
  for (int64_t i = 0; i < batches; ++i) {
    ds.eval_batch(i * W + r, B, T, buf.data());
    double batch = 0;
    if (par.pipeline)
      batch = par.pipeline->forward_only(part, chunks);
    else
      for (int64_t c = 0; c < chunks; ++c) batch += model.forward(part(c)).lm_loss;
    sum += batch / double(chunks);
  }
  reset_router_stats(par.moe_layers());
  for (const auto& [from, into] : par.moe_merges()) reset_router_stats({from});
  double mean = sum / double(batches);
  if (world) {
    world->allreduce_sum(&mean, 1);
    mean /= double(W);
  }
  return mean;
}

// --pp: every rank's pass times, the bubble they make, and the schedule's prediction from them.
void pipeline_metrics(ParallelRun& par, Communicator& world, StepMetrics& m) {
  const PipelineExecutor::StepTimes& t = par.pipeline->last_step_times();
  const PipelineScheduleSpec& spec = par.pipeline->spec();
  const int64_t V = spec.chunks, P = spec.stages, n = 3 + 2 * V;
  std::vector<double> mine{t.run_s, t.wait_s, double(t.sent_bytes)};
  mine.insert(mine.end(), t.forward_s.begin(), t.forward_s.end());
  mine.insert(mine.end(), t.backward_s.begin(), t.backward_s.end());
  std::vector<double> all(static_cast<size_t>(n * world.size()));
  world.allgather(mine.data(), n * int64_t(sizeof(double)), all.data());
  double run = 0, busy = 0, sent = 0;
  for (int r = 0; r < world.size(); ++r) sent += all[size_t(r * n + 2)];
  std::vector<double> f(size_t(P * V)), b(size_t(P * V));
  for (int64_t r = 0; r < P; ++r) {
    const double* x = all.data() + r * par.dp * n;  // the stage's data-parallel rank 0
    run = std::max(run, x[0]);
    double compute = 0;
    for (int64_t c = 0; c < V; ++c) {
      f[size_t(c * P + r)] = x[3 + c] / double(spec.microbatches);
      b[size_t(c * P + r)] = x[3 + V + c] / double(spec.microbatches);
      compute += x[3 + c] + x[3 + V + c];
    }
    busy = std::max(busy, compute);
  }
  m.pp_run_s = run;
  m.pp_bubble = busy > 0 ? run / busy - 1 : 0;
  m.pp_bytes = sent;
  m.comm_bytes = (std::isfinite(m.comm_bytes) ? m.comm_bytes : 0.0) + all[2];  // rank 0's
  if (!spec.ep_overlap)  // combined passes have no separate forward and backward times
    m.pp_schedule_s = simulate_pipeline(spec, f, b).step_s;
}

}  // namespace

double run_training(const TrainOptions& o, Communicator* world, SetupAgreement* setup) {
  // Everything that can be refused is, before any output is created.
  check_train_options(o);
  ModelConfig cfg = load_model_config(o.model_path);
  check_train_layout(o, cfg, world);
  check_model_fits(o.model_path, count_parameters(cfg), world ? world->size() : 1);
  const int W = world ? world->size() : 1, rank = world ? world->rank() : 0;
  const bool root = rank == 0, verbose = root && !o.quiet;
  int threads = o.threads;
  if (threads == 0) threads = std::max(1, int(std::thread::hardware_concurrency()) / W);
  ops::set_num_threads(threads);
  std::optional<DelayedNote> reading(std::in_place, verbose, "reading the data");
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(o.tokenizer);
  std::unique_ptr<TokenDataset> ds =
      open_token_dataset(o.data, *tokenizer, cfg.vocab_size, o.seed, o.split,
                         TextFormat{parse_doc_boundary(o.doc_boundary), o.json_key});
  TrainCheckpoints checkpoints(o, world);
  const bool resuming = !checkpoints.resume_dir().empty();
  MOET_CHECK(!root || o.metrics_path.empty() || resuming || o.overwrite ||
                 output_absent_or_empty(o.metrics_path),
             "--metrics '", o.metrics_path,
             "' already exists; refusing to overwrite it (pass --overwrite, or choose another "
             "path)");

  // A trace per rank (refused up front if the file exists, not after the run).
  std::unique_ptr<TraceRecorder> trace;
  std::string trace_file;
  if (!o.trace_path.empty()) {
    trace_file = TraceRecorder::per_rank_path(o.trace_path, rank, W);
    MOET_CHECK(o.overwrite || output_absent_or_empty(trace_file), "--trace: '", trace_file,
               "' already exists; refusing to overwrite it (pass --overwrite)");
    trace = std::make_unique<TraceRecorder>(rank, "rank " + std::to_string(rank));
    trace->lane(trace::kStepsLane);  // the top lane: steps and evaluations
  }
  // The layout: pipeline stages (--pp), data parallelism within each, experts sharded over
  // groups of --ep ranks of a stage; with overlap, one communication thread runs every
  // collective of the step in order (docs/parallel.md, docs/pipeline.md).
  const PrecisionPolicy precision = resolve_precision(o.precision, o.bf16_layers);
  checkpoints.note("precision", recipe_name(precision.recipe));
  const int64_t rss_before_model = current_rss_bytes();
  const int64_t B = o.micro_batch, T = o.seq, A = o.grad_accum;
  const int DP = W / int(o.pp);  // data-parallel ranks per stage: the global batch is DP x A x B
  // Sample-indexed data number the global batch's sequences consecutively (the cursor is the
  // step: a resumed run reads what the uninterrupted one would have). Planned before the model
  // is built, so that data too small is refused before the start-up note.
  ds->plan(SampleLayout{A, int64_t(DP) * B, o.steps, T});
  reading.reset();
  if (setup) setup->agree();  // every rank's setup succeeded: the collectives may start
  startup_note(verbose, "building the model");
  std::unique_ptr<ParallelRun> par = parallelize(o, cfg, world, precision, threads, trace.get());
  Model& model = par->model();
  DataParallel* dp = par->dp_sync ? &*par->dp_sync : nullptr;
  const std::vector<ExpertExchangeDispatcher*>& exchanges = par->exchanges;
  MOET_ASSERT(DP == par->dp);
  const int step_lane = trace ? trace->lane(trace::kStepsLane) : 0;
  AdamWConfig oc;
  oc.weight_decay = o.weight_decay;
  oc.grad_clip = o.grad_clip;
  StepRunner runner(model, oc, train_lr_schedule(o), o.bias_update_rate, dp);
  runner.set_trace(trace.get());
  runner.set_moe_layers(par->moe_layers(), par->moe_merges());
  if (par->second_lane()) runner.set_second_lane(par->second_lane(), true);
  if (o.deterministic) runner.set_deterministic(B);
  if (par->pipeline) runner.set_pipeline(par->pipeline.get(), par->pp_group.get());
  StateHolder state;
  state.params = &model.params();
  state.adamw = &runner.optimizer();
  state.zero1 = dp ? dp->zero1_state() : nullptr;
  state.world_rank = par->pipeline ? par->dp_rank : rank;
  state.edp_rank = par->layout ? par->layout->edp_group->rank() : 0;
  state.ep = int(o.ep);
  state.pipeline_stage = par->pipeline != nullptr;
  const DataShape data_shape{o.seed, T, A, int64_t(DP) * A * B};
  int64_t first_step = 0;
  if (resuming) {
    first_step = checkpoints.restore(state, runner.optimizer(), data_shape);
    if (verbose && !checkpoints.schedule_note().empty())
      std::printf("moet train: %s\n", checkpoints.schedule_note().c_str());
  } else if (!o.init_from.empty()) {
    if (is_hf_directory(o.init_from))
      load_hf_weights(o.init_from, cfg, model.params());
    else
      load_checkpoint_weights(resolve_checkpoint_dir(o.init_from), model.params(), !par->pipeline);
  }
  // The outputs, made once the run is known to start (a refused run leaves no file behind and
  // the run directory as it was).
  checkpoints.open();
  std::unique_ptr<MetricsWriter> metrics;
  if (root && !o.metrics_path.empty()) {
    const std::filesystem::path folder = std::filesystem::path(o.metrics_path).parent_path();
    if (!folder.empty()) std::filesystem::create_directories(folder);
    if (resuming) {  // continue the interrupted run's file from the checkpoint's step
      MetricsWriter::keep_steps_up_to(o.metrics_path, checkpoints.resume_step());
      metrics = std::make_unique<MetricsWriter>(o.metrics_path, MetricsWriter::Mode::kAppend);
    } else {
      // replaces only what the check above allowed: --overwrite, or an empty file
      metrics = std::make_unique<MetricsWriter>(
          o.metrics_path, o.overwrite || std::filesystem::exists(o.metrics_path));
    }
  }
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (root && !o.tensorboard_dir.empty())
    tensorboard = std::make_unique<TensorBoardWriter>(o.tensorboard_dir);
  if (tensorboard && resuming) tensorboard->mark_resume(first_step + 1);
  if (root && !o.out_dir.empty())
    write_run_info(o, tensorboard ? tensorboard->path() : "", resuming);
  MemoryNeed need;
  need.params = need.grads = model.params().numel() * int64_t(sizeof(float));
  need.optimizer =
      runner.optimizer().has_moments() ? 2 * need.params : (dp ? dp->zero1_moment_bytes() : 0);
  need.weight_operands = model.params().operand_bytes();
  need.activations = par->activation_bytes();
  need.checkpoint = checkpoints.prepare(state);

  // Under --pp each stage holds other layers and as many micro-batches as the schedule keeps in
  // flight there: every rank's activation memory, for the header.
  std::vector<int64_t> activations_per_rank;
  if (par->pipeline) {
    activations_per_rank.resize(size_t(W));
    world->allgather(&need.activations, sizeof(int64_t), activations_per_rank.data());
  }

  // MFU divides by the measured peak of the GEMMs the recipe runs (its main linear layers)
  const ops::Format main_format =
      precision.decoder(cfg.num_hidden_layers / 2, cfg.num_hidden_layers).fprop;
  GemmPeak measured;
  if (!o.peak_tflops) {
    startup_note(verbose, "measuring the GEMM peak that MFU divides by");
    measured = measure_gemm_peak(main_format);
  }
  const double peak = o.peak_tflops ? *o.peak_tflops : measured.tflops;
  const double fpt = flops_per_token(cfg, T, cfg.num_nextn_predict_layers > 0);
  const int64_t tokens_per_step = int64_t(DP) * A * B * T;  // global batch
  // --log-expert-load: the decoder layer index of each MoE layer, in moe_layers() order
  std::vector<int64_t> moe_layer_index;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.is_moe_layer(l)) moe_layer_index.push_back(l);
  if (cfg.mtp_is_moe())
    for (int64_t k = 0; k < cfg.num_nextn_predict_layers; ++k)
      moe_layer_index.push_back(cfg.num_hidden_layers + k);
  if (verbose)
    print_run_header(RunHeader{&o, &cfg, par.get(), W, fpt, precision, main_format, ds->describe(),
                               measured, peak, need, rss_before_model, activations_per_rank,
                               checkpoints.resume_dir(), first_step, checkpoints.saving()});

  std::vector<int32_t> tokens(A * B * (T + 1));
  // made once: a std::function built per step would allocate
  const std::function<const int32_t*(int64_t)> micro_batch = [&](int64_t a) {
    return tokens.data() + a * B * (T + 1);
  };
  auto t_start = std::chrono::steady_clock::now();
  double last_loss = 0;
  const StopSignal stop_signal;  // SIGTERM/SIGINT: finish the step, save, exit 0
  bool stopped = false;
  int64_t skipped = 0, steps_done = first_step;
  double best_eval = StepMetrics::kNone;
  int64_t best_eval_step = 0;
  IntervalMeans interval;  // --log-every > 1: the progress line's means
  if (first_step >= o.steps && verbose)
    std::printf("the checkpoint has done %lld of --steps %lld: nothing to train\n",
                (long long)first_step, (long long)o.steps);
  // This rank's B sequences of each micro-batch of the global batch, prepared ahead.
  std::optional<BatchPrefetcher> prefetcher;
  if (o.prefetch > 0 && first_step < o.steps)
    prefetcher.emplace(*ds, first_step, o.steps, A, par->dp_rank * B, B, T, int(o.prefetch));
  for (int64_t step = first_step; step < o.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    double data_wait = 0;
    if (prefetcher) {
      data_wait = prefetcher->take(step, tokens.data());
    } else {
      for (int64_t a = 0; a < A; ++a)
        ds->fill_sequences(step, a, par->dp_rank * B, B, T, tokens.data() + a * B * (T + 1));
      data_wait = seconds_since(t0);
    }
    TraceRecorder::Span step_span(trace.get(), step_lane, "step", trace::kStep);
    StepResult r = runner.run(step, A, micro_batch);
    step_span.end();
    double dt = seconds_since(t0);
    if (r.skipped) {  // non-finite loss: nothing was updated
      const char* what = std::isnan(r.losses.loss) ? "NaN" : "infinite";
      if (++skipped > o.skip_nonfinite) {
        checkpoints.finish();  // the save in flight, if any, is good: it precedes this step
        const std::string good = checkpoints.newest();
        MOET_FAIL("training diverged at step ", step + 1, ": the loss is ", what, " (", skipped - 1,
                  " such steps skipped, --skip-nonfinite ", o.skip_nonfinite, "); ",
                  good.empty() ? std::string("no checkpoint was saved")
                               : "the last good checkpoint is " + good,
                  "; try a lower --lr");
      }
      if (verbose)
        std::printf("step %lld skipped: the loss is %s (%lld of --skip-nonfinite %lld)\n",
                    (long long)(step + 1), what, (long long)skipped, (long long)o.skip_nonfinite);
      continue;
    }
    last_loss = r.losses.loss;

    StepMetrics m;
    m.step = step + 1;
    m.total_steps = o.steps;
    m.ranks = W;
    m.loss = r.losses.loss;
    m.lm_loss = r.losses.lm_loss;
    if (cfg.num_nextn_predict_layers > 0)
      m.mtp_loss = r.losses.mtp_loss / double(cfg.num_nextn_predict_layers);
    if (cfg.num_moe_layers() > 0) {
      m.balance_loss = r.losses.balance_loss;
      m.z_loss = r.losses.z_loss;
      m.max_expert_load = r.max_expert_load;
      // the step's loads, summed over micro-batches and ranks (StepRunner::run)
      if (o.log_expert_load > 0 && (step + 1) % o.log_expert_load == 0) {
        m.expert_load_layers = moe_layer_index;
        for (MoeLayer* layer : par->moe_layers()) m.expert_load.push_back(layer->stats().load_E);
        MOET_ASSERT(m.expert_load.size() == moe_layer_index.size());
      }
    }
    m.lr = r.lr;
    m.grad_norm = r.grad_norm;
    m.tokens_per_s = double(tokens_per_step) / dt;
    m.tflops = model_tflops(fpt, double(tokens_per_step), dt, W);
    m.mfu = m.tflops / peak;
    m.tokens = (step + 1) * tokens_per_step;
    m.step_time_s = dt;
    m.data_wait_s = data_wait;
    if (dp) {
      double a2a_s = 0, a2a_exposed = 0, bytes = 0, other_nodes = 0, grad_exposed = 0;
      double rows_max = 0, rows_mean = 0;
      for (ExpertExchangeDispatcher* d : exchanges) {
        const auto [mx, mean] = d->rows_received_max_mean();
        rows_max += mx, rows_mean += mean;
        a2a_s += d->a2a_seconds();
        a2a_exposed += d->exposed_seconds();
        bytes += double(d->bytes_sent());
        other_nodes += double(d->bytes_sent_other_nodes());
        d->reset_timers();
        d->reset_bytes();
      }
      if (o.ep_ranks_per_node > 0) m.comm_bytes_other_nodes = other_nodes;
      m.grad_sync_s = dp->take_sync_seconds(&grad_exposed);
      m.a2a_s = a2a_s;
      m.exposed_comm_s = a2a_exposed + grad_exposed;
      m.a2a_exposed_s = a2a_exposed;
      m.grad_sync_bytes = double(dp->take_sync_bytes());
      m.comm_bytes = bytes + m.grad_sync_bytes;
      if (rows_mean > 0) m.ep_load_imbalance = rows_max / rows_mean;
    }
    if (par->pipeline) pipeline_metrics(*par, *world, m);
    m.elapsed_s = seconds_since(t_start);
    m.peak_rss_mb = double(peak_rss_bytes()) / 1048576.0;
    m.eta_s = m.elapsed_s / double(step + 1 - first_step) * double(o.steps - step - 1);
    bool last = step + 1 == o.steps;
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || (last && o.eval_batches > 0)) {
      TraceRecorder::Span eval_span(trace.get(), step_lane, "eval", trace::kEval);
      m.eval_loss = evaluate(*par, B, *ds, o.eval_batches, tokens, world);
      eval_span.end();
      if (std::isfinite(m.eval_loss) && !(m.eval_loss >= best_eval))
        best_eval = m.eval_loss, best_eval_step = step + 1;
      // Evaluation's exchanges belong to no training step.
      for (ExpertExchangeDispatcher* d : exchanges) d->reset_timers(), d->reset_bytes();
    }
    // A stop signal on any rank stops every rank after the same step.
    bool stop = StopSignal::received() != 0;
    if (world) {
      double s = stop ? 1 : 0;
      world->allreduce_sum(&s, 1);
      stop = s > 0;
    }
    if (checkpoints.due(step + 1, last) || (stop && checkpoints.saving())) {
      m.save_s = checkpoints.save(step + 1, state, runner.optimizer(), data_shape);
      // a periodic save says so (the last one is reported with the summary)
      if (verbose && !last && !stop)
        std::printf("checkpoint: step %lld -> %s/step-%07lld (the step waited %.3f s%s)\n",
                    (long long)(step + 1), o.out_dir.c_str(), (long long)(step + 1), m.save_s,
                    o.sync_save ? "" : "; written in the background");
    }
    const bool log_now = (step + 1) % o.log_every == 0 || last || stop;
    interval.add(m);
    if (log_now && o.log_every > 1) interval.fill(m);
    if (metrics) metrics->write(m);
    if (tensorboard) tensorboard->write(m);
    if (tensorboard && log_now) tensorboard->flush();
    if (verbose && log_now) {
      std::printf("%s\n", format_progress_line(m).c_str());
      std::fflush(stdout);
    }
    steps_done = step + 1;
    if (stop) {
      stopped = true;
      break;
    }
  }
  const std::string saved = checkpoints.finish();
  if (trace) {  // checked at the start; its folder made as --out's is
    const std::filesystem::path folder = std::filesystem::path(trace_file).parent_path();
    if (!folder.empty()) std::filesystem::create_directories(folder);
    trace->write(trace_file, true);
  }
  if (tensorboard) tensorboard->flush();
  if (root && stopped) {
    const int sig = StopSignal::received();
    std::printf(
        "moet: stopped by %s after step %lld; %s\n",
        sig ? StopSignal::name(sig) : "a signal to another rank", (long long)steps_done,
        saved.empty() ? "no checkpoint saved (no --out)" : ("checkpoint at " + saved).c_str());
  } else if (verbose && !saved.empty()) {
    const double mb = double(checkpoints.last_bytes()) / 1e6, ws = checkpoints.last_write_seconds();
    std::printf("checkpoint: %s (rank 0 wrote %.1f MB in %.2f s, %.2f GB/s)\n", saved.c_str(), mb,
                ws, ws > 0 ? mb / 1e3 / ws : 0.0);
  }
  if (verbose) {
    RunSummary sum;
    sum.steps = steps_done - first_step;
    sum.tokens = sum.steps * tokens_per_step;
    sum.seconds = seconds_since(t_start);
    sum.best_eval_loss = best_eval;
    sum.best_eval_step = best_eval_step;
    sum.metrics_path = o.metrics_path;
    sum.tensorboard_dir = o.tensorboard_dir;
    sum.checkpoint = saved;
    sum.run_dir = o.out_dir;
    std::printf("%s", format_run_summary(sum).c_str());
  }
  std::fflush(stdout);
  return last_loss;
}

}  // namespace moet

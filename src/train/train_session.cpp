#include "train/train_session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf.h"
#include "core/error.h"
#include "core/warning.h"
#include "data/dataset_tokenizer.h"
#include "data/open_dataset.h"
#include "kernels/ops.h"
#include "measure/gemm_choice.h"
#include "measure/gemm_peak.h"
#include "measure/recipe_choice.h"
#include "metrics/flops.h"
#include "metrics/memory.h"
#include "train/evaluation.h"
#include "train/run_header.h"
#include "train/setup_agreement.h"
#include "train/train_options.h"
#include "train/train_options_check.h"

namespace moet {

namespace {

// What the run holds in memory, for the header (the activations every rank's under --pp).
MemoryNeed memory_need(TrainSession& s, std::vector<int64_t>* activations_per_rank) {
  Model& model = s.par->model();
  DataParallel* dp = s.par->dp_sync ? &*s.par->dp_sync : nullptr;
  MemoryNeed need;
  need.params = need.grads = model.params().numel() * int64_t(sizeof(float));
  need.optimizer = s.runner->optimizer().has_moments() ? s.runner->optimizer().moment_bytes()
                                                       : (dp ? dp->zero1_moment_bytes() : 0);
  need.optimizer_fp32 = need.optimizer * 8 / moment_dtypes(s.o.optim).bytes_per_param();
  need.weight_operands = model.params().operand_bytes();
  need.activations = s.par->activation_bytes();
  need.checkpoint = s.checkpoints->prepare(s.state);
  // Under --pp each stage holds other layers and as many micro-batches as the schedule keeps in
  // flight there.
  if (s.par->pipeline) {
    activations_per_rank->resize(size_t(s.ranks));
    s.world->allgather(&need.activations, sizeof(int64_t), activations_per_rank->data());
  }
  return need;
}

// The step runner for the layout parallelize() built.
std::unique_ptr<StepRunner> make_runner(const TrainOptions& o, ParallelRun& par,
                                        TraceRecorder* trace) {
  AdamWConfig oc;
  oc.weight_decay = o.optim.weight_decay;
  oc.grad_clip = o.optim.grad_clip;
  oc.moments = moment_dtypes(o.optim);
  return std::make_unique<StepRunner>(par.model(), oc, train_lr_schedule(o),
                                      o.optim.bias_update_rate, par.step_plan(o, trace));
}

// The state a checkpoint holds, as this rank holds it.
StateHolder state_of(const TrainOptions& o, TrainSession& s) {
  ParallelRun& par = *s.par;
  StateHolder state;
  state.params = &par.model().params();
  state.adamw = &s.runner->optimizer();
  state.zero1 = par.dp_sync ? par.dp_sync->zero1_state() : nullptr;
  // a stage's (or a tensor-parallel part's) rank among the ranks that hold the same weights
  state.world_rank = par.pipeline || par.tp > 1 ? par.dp_rank : s.rank;
  state.tp_part = par.tp_rank;
  state.edp_rank = par.layout ? par.layout->edp_group->rank() : 0;
  state.ep = int(o.parallel.ep);
  state.pipeline_stage = par.pipeline != nullptr;
  return state;
}

}  // namespace

double TrainSession::read_batch(int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  if (prefetcher_) return prefetcher_->take(step, tokens_.data());
  const int64_t B = o.data.micro_batch, T = o.data.seq;
  for (int64_t a = 0; a < o.data.grad_accum; ++a)
    data->fill_sequences(step, a, par->dp_rank * B, B, T, tokens_.data() + a * B * (T + 1));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const int32_t* TrainSession::micro_batch(int64_t a) const {
  return tokens_.data() + a * o.data.micro_batch * (o.data.seq + 1);
}

namespace {

// The checks that can refuse the run, the model config, and the threads (returned).
int check_and_configure(TrainSession& s) {
  const TrainOptions& o = s.o;
  check_train_options(o);
  s.cfg = load_model_config(o.model_path);
  check_train_layout(o, s.cfg, s.world);
  check_model_fits(o.model_path, count_parameters(s.cfg), s.ranks,
                   8 + moment_dtypes(o.optim).bytes_per_param());
  int threads = o.parallel.threads;
  if (threads == 0) threads = std::max(1, int(std::thread::hardware_concurrency()) / s.ranks);
  ops::set_num_threads(threads);
  // --deterministic: sums that do not depend on the thread count either (a GEMM's K is never
  // split over threads), so N ranks x T threads train what one process on any thread count does
  ops::set_thread_invariant(o.parallel.deterministic);
  return threads;
}

// The tokenizer and the dataset.
void open_data(TrainSession& s) {
  const TrainOptions& o = s.o;
  s.tokenizer = load_tokenizer(o.data.tokenizer);
  s.data = open_token_dataset(o.data.spec, *s.tokenizer, s.cfg.vocab_size, o.data.order_seed(),
                              o.data.split, TextFormat{o.data.doc_boundary, o.data.json_key});
  if (!o.logging.quiet && o.data.tokenizer.empty()) {
    const std::string w = unrecorded_tokenizer_warning(o.data.spec);
    if (!w.empty()) warn(w);
  }
}

// Every rank takes rank 0's recipe and operand store (measured on each, cached).
void agree_on_recipe(Communicator* world, RecipeChoice& c) {
  if (!world || world->size() < 2) return;
  std::vector<int32_t> all(size_t(2 * world->size()));
  const int32_t mine[2] = {int32_t(c.policy.recipe), c.operands == DType::BF16};
  world->allgather(mine, sizeof mine, all.data());
  if (Recipe(all[0]) != c.policy.recipe) c.auto_why += " (rank 0's choice)";
  if ((all[1] != 0) != (c.operands == DType::BF16)) c.operands_why = "rank 0's choice";
  c.policy.recipe = Recipe(all[0]);
  c.operands = all[1] ? DType::BF16 : DType::F32;
}

// The weights: a checkpoint's (and its notes), an --init-from's, or the initialisation.
void restore_or_initialise(TrainSession& s) {
  const TrainOptions& o = s.o;
  if (!s.checkpoints->resume_dir().empty()) {
    s.first_step = s.checkpoints->restore(s.state, s.runner->optimizer(), s.data_shape);
    for (const std::string* note : {&s.checkpoints->schedule_note(), &s.checkpoints->data_note(),
                                    &s.checkpoints->moments_note()})
      if (s.verbose && !note->empty()) std::printf("moet train: %s\n", note->c_str());
  } else if (!o.checkpoint.init_from.empty()) {
    if (is_hf_directory(o.checkpoint.init_from))
      load_hf_weights(o.checkpoint.init_from, s.cfg, s.par->model().params());
    else
      load_checkpoint_weights(resolve_checkpoint_dir(o.checkpoint.init_from),
                              s.par->model().params(), !s.par->pipeline);
  }
}

// The GEMM peaks (cached; both where the CPU has bf16 GEMMs) and the one MFU divides by: the
// recipe's own (its main linear layers' operands), unless --peak-tflops.
GemmPeaks measure_peaks(const TrainSession& s, const PrecisionPolicy& precision) {
  GemmPeaks p;
  if (s.o.logging.peak_tflops) {
    p.mfu = *s.o.logging.peak_tflops;
    return p;
  }
  const bool bf16 = ops::cpu_has_bf16() || ops::gemm_operand_dtype() == DType::BF16;
  if (!cached_gemm_peak(DType::F32) || (bf16 && !cached_gemm_peak(DType::BF16)))
    startup_note(s.verbose,
                 "measuring the GEMM peaks that MFU divides by (the first run on this CPU)");
  p.fp32 = gemm_peak(DType::F32);
  if (bf16) p.bf16 = gemm_peak(DType::BF16);
  const ops::Format main =
      precision.decoder(s.cfg.num_hidden_layers / 2, s.cfg.num_hidden_layers).fprop;
  p.recipe_uses_bf16 = main != ops::Format::F32 && ops::gemm_operand_dtype() == DType::BF16;
  p.mfu = p.recipe_uses_bf16 ? p.bf16.tflops : p.fp32.tflops;
  return p;
}

}  // namespace

std::unique_ptr<TrainSession> start_training(const TrainOptions& o, Communicator* world,
                                             SetupAgreement* setup) {
  auto s = std::make_unique<TrainSession>(o);
  s->world = world;
  s->ranks = world ? world->size() : 1;
  s->rank = world ? world->rank() : 0;
  s->verbose = s->rank == 0 && !o.logging.quiet;
  // Everything that can be refused is, before any output is created.
  const int threads = check_and_configure(*s);
  const ModelConfig& cfg = s->cfg;
  std::optional<DelayedNote> reading(std::in_place, s->verbose, "reading the data");
  open_data(*s);
  s->checkpoints = std::make_unique<TrainCheckpoints>(o, world);
  const bool resuming = !s->checkpoints->resume_dir().empty();
  s->outputs = std::make_unique<TrainOutputs>(o, s->rank, s->ranks, resuming);
  const int64_t rss_before_model = current_rss_bytes();
  const int64_t B = o.data.micro_batch, T = o.data.seq, A = o.data.grad_accum;
  const int DP = s->ranks / int(o.parallel.pp *
                                o.parallel.tp);  // data-parallel ranks: the batch is DP x A x B
  // Sample-indexed data number the global batch's sequences consecutively (the cursor is the
  // step: a resumed run reads what the uninterrupted one would have). Planned before the model
  // is built, so that data too small is refused before the start-up note.
  s->data->plan(SampleLayout{A, int64_t(DP) * B, o.optim.steps, T});
  reading.reset();
  // The recipe --precision resolves to here and where its GEMMs run (measured, cached)
  RecipeChoice recipe =
      choose_recipe({o.precision.recipe, o.precision.bf16_layers, o.precision.bf16_end(),
                     model_gemm_shapes(cfg, B * T), s->checkpoints->recorded_precision(),
                     s->checkpoints->recorded_gemm_operands(), !o.parallel.deterministic});
  if (setup) setup->agree();  // every rank's setup succeeded: the collectives may start
  agree_on_recipe(world, recipe);
  ops::set_gemm_operand_dtype(recipe.operands, recipe.operands_why);
  const PrecisionPolicy precision = recipe.policy;
  s->checkpoints->note("precision", recipe_name(precision.recipe));
  s->checkpoints->note("gemm_operands", gemm_operands_name(recipe.operands));
  // The layout: pipeline stages (--pp), data parallelism within each, experts sharded over
  // groups of --ep ranks of a stage; with overlap, one communication thread runs every
  // collective of the step in order (docs/parallel.md, docs/pipeline.md).
  startup_note(s->verbose, "building the model");
  s->par = parallelize(o, cfg, world, precision, threads, s->outputs->trace());
  MOET_ASSERT(DP == s->par->dp);
  s->runner = make_runner(o, *s->par, s->outputs->trace());
  s->state = state_of(o, *s);
  s->data_shape = DataShape{o.data.order_seed(), T, A, int64_t(DP) * A * B};
  restore_or_initialise(*s);
  // The outputs, made once the run is known to start (a refused run leaves no file behind and
  // the run directory as it was).
  s->checkpoints->open();
  const GemmPeaks peaks = measure_peaks(*s, precision);
  RunStart run_start;
  run_start.first_step = s->first_step;
  run_start.precision = recipe_name(precision.recipe);
  run_start.data_changed_from = s->checkpoints->data_changed_from();
  run_start.gemm_peaks = peaks.json();
  s->outputs->open(s->checkpoints->resume_step(), run_start);
  std::vector<int64_t> activations_per_rank;
  const MemoryNeed need = memory_need(*s, &activations_per_rank);
  s->recorder = std::make_unique<StepRecorder>(o, cfg, *s->par, world, peaks.mfu);
  if (s->verbose)
    print_run_header(RunHeader{&o, &cfg, s->par.get(), s->ranks, s->recorder->flops_per_token(),
                               recipe, s->data->describe(), peaks, need, rss_before_model,
                               activations_per_rank, s->checkpoints->resume_dir(), s->first_step,
                               s->checkpoints->saving()});
  s->tokens_.resize(size_t(A * B * (T + 1)));
  if (s->first_step >= o.optim.steps && s->verbose)
    std::printf("the checkpoint has done %lld of --steps %lld: nothing to train\n",
                (long long)s->first_step, (long long)o.optim.steps);
  if (o.data.prefetch > 0 && s->first_step < o.optim.steps)
    s->prefetcher_.emplace(*s->data, s->first_step, o.optim.steps, A, s->par->dp_rank * B, B, T,
                           int(o.data.prefetch));
  return s;
}

}  // namespace moet

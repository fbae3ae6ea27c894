#include "train/parallelize.h"

#include <cstdlib>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/trace.h"
#include "parallel/allgather_dispatcher.h"
#include "parallel/alltoall_dispatcher.h"
#include "parallel/pipeline_layout.h"
#include "parallel/pipeline_norm.h"
#include "parallel/rank_grid.h"
#include "parallel/tp_grad_norm.h"
#include "parallel/tp_group.h"

namespace moet {

// "auto": a communication thread only pays when it has a core of its own; a thread spinning
// in MPI on a core that compute needs slows the step (docs/benchmarks.md).
OverlapChoice choose_overlap(OverlapMode mode, int threads_per_rank) {
  if (mode == OverlapMode::kOn) return {true, "--overlap on"};
  if (mode == OverlapMode::kOff) return {false, "--overlap off"};
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
  const int cores = int(std::thread::hardware_concurrency());
  const bool on = cores >= ranks_here * (threads_per_rank + 1);
  return {on, "--overlap auto: " + std::to_string(cores) + " cores" + (on ? " >= " : " < ") +
                  std::to_string(ranks_here) + " ranks here x (" +
                  std::to_string(threads_per_rank) + " compute thread" +
                  (threads_per_rank == 1 ? "" : "s") + " + 1)"};
}

std::vector<ModelPart> pipeline_parts(const ModelConfig& cfg, const std::string& layout,
                                      int64_t S) {
  const int64_t L = cfg.num_hidden_layers, K = cfg.num_nextn_predict_layers;
  std::vector<size_t> stage;  // of E, the layers, the MTP layers, the loss
  if (layout.empty()) {
    if (L % S != 0) {
      const std::string working = balanced_pipeline_layout(L, K, S);
      fail(str("the ", L, " decoder layers do not split evenly over ", S,
               " virtual pipeline stages (--pp x --vpp): give --pp-layout",
               working.empty() ? std::string(" (no layout gives every stage a layer)")
                               : str(", for example --pp-layout \"", working, "\"")));
    }
    stage.push_back(0);
    for (int64_t l = 0; l < L; ++l) stage.push_back(size_t(l / (L / S)));
    for (int64_t k = 0; k <= K; ++k) stage.push_back(size_t(S - 1));
  } else {
    stage = parse_pipeline_layout(layout, L, K, S);
  }
  const size_t loss = stage.back();
  MOET_CHECK(stage[0] == 0, "--pp-layout '", layout, "' puts the embedding on virtual stage ",
             stage[0], "; it belongs on the first");
  MOET_CHECK(loss == size_t(S - 1), "--pp-layout '", layout, "' puts the loss on virtual stage ",
             loss, "; it belongs on the last (", S - 1, ")");
  for (int64_t k = 0; k < K; ++k)
    MOET_CHECK(stage[size_t(1 + L + k)] == loss, "--pp-layout '", layout,
               "': moet runs the MTP layers on the loss's stage (m next to L)");
  std::vector<ModelPart> parts(static_cast<size_t>(S));
  int64_t next = 0;
  for (int64_t k = 0; k < S; ++k) {
    ModelPart& p = parts[size_t(k)];
    p.embedding = k == 0;
    p.loss = k == S - 1;
    p.first_layer = next;
    while (next < L && stage[size_t(1 + next)] == size_t(k)) ++next;
    p.end_layer = next;
    MOET_CHECK(p.embedding || p.loss || p.end_layer > p.first_layer, "--pp-layout '", layout,
               "': virtual stage ", k, " holds nothing");
  }
  return parts;
}

std::vector<MoeLayer*> ParallelRun::moe_layers() const {
  std::vector<MoeLayer*> out;
  for (const auto& chunk : chunks)
    for (MoeLayer* m : chunk[0]->moe_layers()) out.push_back(m);
  return out;
}

std::vector<std::pair<MoeLayer*, MoeLayer*>> ParallelRun::moe_merges() const {
  std::vector<std::pair<MoeLayer*, MoeLayer*>> out;
  if (Model* lane = second_lane()) out = second_lane_merges(*models[0], *lane);
  for (const auto& chunk : chunks)
    for (size_t s = 1; s < chunk.size(); ++s)
      for (size_t i = 0; i < chunk[0]->moe_layers().size(); ++i)
        out.emplace_back(chunk[s]->moe_layers()[i], chunk[0]->moe_layers()[i]);
  return out;
}

StepPlan ParallelRun::step_plan(const TrainOptions& o, TraceRecorder* trace) {
  StepPlan plan;
  plan.seed = o.data.seed;
  plan.dp = dp_sync ? &*dp_sync : nullptr;
  plan.pp = pp_group.get();
  plan.pipeline = pipeline.get();
  plan.moe_layers = moe_layers();
  plan.merges = moe_merges();
  // each chunk's MoE layers are its decoder layers' in order, then the MTP modules'
  for (const auto& chunk : chunks) {
    const Model& m = *chunk[0];
    const ModelConfig& cfg = m.config();
    int64_t first = 0, decoder = 0, decoder_total = 0;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      if (!cfg.is_moe_layer(l)) continue;
      ++decoder_total;
      if (l < m.part().first_layer)
        ++first;
      else if (l < m.part().end_layer)
        ++decoder;
    }
    for (int64_t i = 0; i < int64_t(m.moe_layers().size()); ++i)
      plan.moe_index.push_back(i < decoder ? first + i : decoder_total + (i - decoder));
  }
  plan.trace = trace;
  const int64_t sequences = o.data.micro_batch;
  if (pipeline && o.parallel.deterministic)
    plan.accumulation =
        deterministic_pipeline_accumulation(model(), sequences, *pipeline, *pp_group, *plan.dp);
  else if (pipeline)
    plan.accumulation = pipeline_accumulation(model(), *pipeline, *pp_group, *plan.dp);
  else if (o.parallel.deterministic)
    plan.accumulation = deterministic_accumulation(model(), sequences, plan.dp);
  else if (Model* lane = second_lane())
    plan.accumulation = two_lane_accumulation(model(), *lane, /*interleave=*/true, plan.dp);
  else
    plan.accumulation = plain_accumulation(model(), plan.dp);
  return plan;
}

int64_t ParallelRun::activation_bytes() const {
  int64_t total = 0;
  for (const auto& m : models) total += int64_t(m->activation_bytes());
  return total;
}

namespace {

// --ep > 1: each MoE layer's dispatcher exchanges its tokens over the expert-parallel group (by
// all-to-all or all-gather, on the communication thread when there is one) and is listed in
// r.exchanges.
DispatcherFactory expert_dispatchers(ParallelRun& r, const TrainOptions& o, TraceRecorder* trace) {
  return [&r, &o, trace](int64_t E) -> std::unique_ptr<TokenDispatcher> {
    std::unique_ptr<ExpertExchangeDispatcher> d;
    if (o.parallel.dispatcher == DispatcherKind::kAllGather)
      d = std::make_unique<AllGatherDispatcher>(*r.layout->ep_group, E);
    else
      d = std::make_unique<AllToAllDispatcher>(*r.layout->ep_group, E);
    d->set_stream(r.stream.get());
    d->set_trace(trace);
    if (o.parallel.ep_ranks_per_node > 0) d->set_ranks_per_node(o.parallel.ep_ranks_per_node);
    r.exchanges.push_back(d.get());
    return d;
  };
}

// This rank's coordinates in Megatron's grid (tp-cp-ep-dp-pp, the pipeline outermost; cp = 1
// today) and its groups: the pipeline's, the data-parallel one (the ranks that hold the same
// weights; the world without --pp and --tp), the tensor-parallel one. Returns the data-parallel
// group, over which the layout's expert groups and the gradient reduction run.
Communicator* split_groups(ParallelRun& r, Communicator& world) {
  const RankGrid grid = RankGrid::attention(r.world_size, r.tp, 1, r.pp);
  r.pp_rank = int(grid.coordinate(r.world_rank, "pp"));
  r.dp_rank = int(grid.coordinate(r.world_rank, "dp"));
  r.tp_rank = int(grid.coordinate(r.world_rank, "tp"));
  Communicator* data_parallel = &world;
  if (r.pp > 1) r.pp_group = world.split(int(grid.group_of(r.world_rank, "pp")), r.pp_rank);
  if (r.pp > 1 || r.tp > 1) {
    r.dp_group = world.split(int(grid.group_of(r.world_rank, "dp")), r.dp_rank);
    data_parallel = r.dp_group.get();
  }
  if (r.tp > 1) {
    r.tp_group = world.split(int(grid.group_of(r.world_rank, "tp")), r.tp_rank);
    r.tp_collectives = std::make_unique<CommunicatorTpGroup>(*r.tp_group);
  }
  return data_parallel;
}

// Under mpirun: the gradient reduction over the data-parallel group, started as each block's
// gradients are final, and the gradient norm's combiner — the split weights' Σ g² added over the
// tensor-parallel group, then the stages' entries gathered over the pipeline.
void connect_data_parallel(ParallelRun& r, const TrainOptions& o, const ModelConfig& cfg,
                           TraceRecorder* trace) {
  r.dp_sync.emplace(*r.layout, r.params(), r.stream.get(), o.parallel.zero1,
                    moment_dtypes(o.optim));
  DataParallel& dp = *r.dp_sync;
  dp.set_trace(trace);
  std::shared_ptr<TensorParallelGradNorm> tp_norm;
  if (r.tp > 1) tp_norm = std::make_shared<TensorParallelGradNorm>(*r.tp_group, r.params());
  if (r.pipeline) {
    r.pipeline->set_final_gradient_hook([&dp](int64_t layer) { dp.on_layer_done(layer); });
    auto norm = std::make_shared<PipelineGradNorm>(*r.pp_group, r.params(), cfg.num_hidden_layers);
    dp.set_norm_combiner([norm, tp_norm](const SquareSums& sums) {
      return (*norm)(tp_norm ? tp_norm->sums(sums) : sums);
    });
    return;
  }
  if (tp_norm) dp.set_norm_combiner([tp_norm](const SquareSums& sums) { return (*tp_norm)(sums); });
  // gradient buckets start when the last lane to finish a block has finished it
  r.models.back()->set_backward_hook([&dp](int64_t layer) { dp.on_layer_done(layer); });
}

}  // namespace

std::unique_ptr<ParallelRun> parallelize(const TrainOptions& o, const ModelConfig& cfg,
                                         Communicator* world, const PrecisionPolicy& precision,
                                         int threads, TraceRecorder* trace) {
  auto run = std::make_unique<ParallelRun>();
  ParallelRun& r = *run;
  r.world_size = world ? world->size() : 1;
  r.world_rank = world ? world->rank() : 0;
  r.pp = int(o.parallel.pp);
  MOET_CHECK(r.world_size % r.pp == 0, "--pp ", o.parallel.pp, " does not divide the ",
             r.world_size, " ranks");
  r.tp = int(o.parallel.tp);
  r.dp = r.world_size / (r.pp * r.tp);
  DispatcherFactory dispatchers;
  if (world) {
    Communicator* stage_world = split_groups(r, *world);
    if (r.tp_collectives) r.tp_collectives->set_trace(trace);
    r.layout = make_parallel_layout(*stage_world, int(o.parallel.ep));
    if (choose_overlap(o.parallel.overlap, threads).on && stage_world->size() > 1) {
      r.stream = std::make_unique<CommStream>();
      r.stream->set_trace(trace);
    }
    if (o.parallel.ep > 1) dispatchers = expert_dispatchers(r, o, trace);
  }
  const int64_t B = o.data.micro_batch, T = o.data.seq;
  const ModelSpec model_spec{
      .micro_batch = o.parallel.deterministic ? 1 : B,
      .seq_len = T,
      .loss_weights = {o.optim.mtp_lambda, o.optim.balance_alpha, o.optim.z_loss_coef},
      .dispatchers = dispatchers,
      .precision = precision,
      .recompute = o.recompute.plan(),
      // --deterministic: TP-invariant sums, on one process too, so that any --tp gives its bits
      .tp = {.part = r.tp_rank,
             .parts = r.tp,
             .group = r.tp_collectives.get(),
             .invariant = o.parallel.deterministic && tp_invariant_sums(cfg, precision),
             .sequence_parallel = o.parallel.sequence_parallel}};
  if (r.pp == 1) {
    // --deterministic: a model for one sequence, run B times per micro-batch; --a2a-overlap:
    // two lanes of B/2 sequences over one set of parameters.
    ModelSpec lane = model_spec;
    if (o.parallel.a2a_overlap && !o.parallel.deterministic) lane.micro_batch = B / 2;
    r.models.push_back(std::make_unique<Model>(cfg, lane));
    r.models[0]->init_parameters(o.data.seed);
    lane.shared = r.models[0].get();
    if (o.parallel.a2a_overlap) r.models.push_back(std::make_unique<Model>(cfg, lane));
    r.chunks.push_back({r.models[0].get()});
  } else {
    PipelineScheduleSpec spec;
    spec.stages = o.parallel.pp;
    spec.chunks = o.parallel.chunks();
    // --deterministic: every sequence is a micro-batch of the pipeline
    spec.microbatches = o.parallel.deterministic ? o.data.grad_accum * B : o.data.grad_accum;
    spec.ep_overlap = o.parallel.a2a_overlap;  // combined 1F1B
    spec.kind = o.parallel.pipeline_schedule;
    check_pipeline_schedule(spec);
    const std::vector<ModelPart> parts =
        pipeline_parts(cfg, o.parallel.pp_layout, o.parallel.pp * spec.chunks);
    const std::vector<int64_t> slots = PipelineExecutor::slots_per_chunk(spec, r.pp_rank);
    r.stage_params.share_declarations();
    for (int64_t c = 0; c < spec.chunks; ++c) {
      std::vector<Model*>& chunk = r.chunks.emplace_back();
      for (int64_t s = 0; s < slots[size_t(c)]; ++s) {
        ModelSpec stage = model_spec;
        stage.part = parts[size_t(pipeline_stage(spec, r.pp_rank, c))];
        // the V's rank 0 holds the first and the last stage: the MTP modules read the
        // embedding itself
        stage.part.embedding_on_rank = pipeline_place(spec, 0).rank == r.pp_rank;
        stage.store = &r.stage_params;
        r.models.push_back(std::make_unique<Model>(cfg, stage));
        chunk.push_back(r.models.back().get());
      }
    }
    r.stage_params.allocate();
    r.stage_params.initialize(o.data.seed, cfg.initializer_range);
    r.pipeline = std::make_unique<PipelineExecutor>(*r.pp_group, spec, r.chunks);
    r.pipeline->set_trace(trace);
    r.pipeline->set_delay_weight_gradients(o.parallel.delay_wgrad_compute);
  }
  for (auto& m : r.models) m->set_trace(trace);
  if (r.layout) connect_data_parallel(r, o, cfg, trace);
  return run;
}

}  // namespace moet

#include "train/run_header.h"

#include <chrono>
#include <cstdio>

#include "kernels/ops.h"
#include "metrics/flops.h"
#include "model/params.h"
#include "parallel/rank_grid.h"

namespace moet {

void startup_note(bool verbose, const std::string& what) {
  if (!verbose) return;
  std::printf("moet train: %s ...\n", what.c_str());
  std::fflush(stdout);
}

DelayedNote::DelayedNote(bool verbose, std::string what, double delay_s) {
  if (!verbose) return;
  waiter_ = std::thread([this, what = std::move(what), delay_s] {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(delay_s), [this] { return done_; }))
      startup_note(true, what);
  });
}

DelayedNote::~DelayedNote() {
  if (!waiter_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_one();
  waiter_.join();
}

namespace {

// --tp: what share of the weights this rank holds, by kind (attention, the MLPs — dense and
// shared experts —, the vocabulary's embedding and heads, the rest, which every part holds whole).
void print_tensor_parallel(const ParallelRun& par) {
  enum Kind { kAttention, kMlp, kVocabulary, kRest, kKinds };
  const char* names[kKinds] = {"attention", "MLPs", "vocabulary", "norms and the rest"};
  double here[kKinds] = {}, whole[kKinds] = {};
  for (const Weight& w : par.models[0]->params().weights()) {
    const std::string& n = w.name;
    const Kind k =
        n.find(".self_attn.") != std::string::npos ? kAttention
        : n.find(".mlp.") != std::string::npos     ? kMlp
        : n.find("embed_tokens") != std::string::npos || n.find("head") != std::string::npos
            ? kVocabulary
            : kRest;
    here[k] += double(w.value.numel());
    whole[k] += double(w.value.numel()) * double(w.shard.parts);
  }
  std::printf("tensor parallel: this rank's parameters%s:", par.pipeline ? " (of its stage)" : "");
  for (int k = 0; k < kKinds; ++k)
    if (whole[k] > 0)
      std::printf("%s %s %.3fM of %.3fM (%.0f%%)", k ? "," : "", names[k], here[k] / 1e6,
                  whole[k] / 1e6, 100 * here[k] / whole[k]);
  const TensorParallel& tp = par.models[0]->tensor_parallel();
  if (tp.sequence_parallel)
    std::printf("; sequence parallel: the residual stream and norms hold 1/%lld of each sequence",
                (long long)tp.parts);
  std::printf("\n");
}

// Under mpirun: the ranks' layout, the global batch it makes, and how communication runs.
void print_layout(const RunHeader& h, int64_t DP) {
  const TrainOptions& o = *h.options;
  const ParallelRun& par = *h.run;
  const int64_t W = h.world_size, ep = o.parallel.ep;
  if (o.parallel.tp > 1)
    std::printf("layout: %lld ranks = pp %lld x dp %lld x tp %lld", (long long)W,
                (long long)o.parallel.pp, (long long)DP, (long long)o.parallel.tp);
  else
    std::printf("layout: %lld ranks = pp %lld x dp %lld", (long long)W, (long long)o.parallel.pp,
                (long long)DP);
  if (o.parallel.chunks() > 1)
    std::printf(" (vpp %lld chunks per stage)", (long long)o.parallel.chunks());
  if (h.config->num_moe_layers() > 0)
    std::printf("; experts over ep %lld ranks, each expert's replicas over edp %lld", (long long)ep,
                (long long)(DP / ep));
  if (o.parallel.zero1) std::printf("; ZeRO-1 (AdamW moments sharded over dp)");
  std::printf("\n");
  // Megatron's two grids over the same ranks (parallel folding; parallel/rank_grid.h)
  std::printf("grids: attention %s; experts %s\n",
              RankGrid::attention(W, o.parallel.tp, 1, o.parallel.pp).describe().c_str(),
              RankGrid::experts(W, 1, ep, o.parallel.pp).describe().c_str());
  const OverlapChoice overlap = choose_overlap(o.parallel.overlap, ops::num_threads());
  const bool on = par.stream != nullptr;
  std::printf("communication: %s (%s)%s\n",
              on ? "on a communication thread, overlapping compute"
                 : "on the compute thread, not overlapped",
              overlap.why.c_str(),
              on || !overlap.on ? "" : "; one data-parallel rank: nothing to overlap");
  if (par.tp > 1) print_tensor_parallel(par);
  if (ep > 1)
    std::printf("expert exchange: %s over %lld ranks%s\n", dispatcher_name(o.parallel.dispatcher),
                (long long)ep,
                o.parallel.a2a_overlap ? ", two lanes interleaved (--a2a-overlap)" : "");
}

// What the activation arenas hold on this rank, over its models (lanes, pipeline slots); with
// recomputation, what it saves.
void print_recompute(const ParallelRun& par) {
  double kept = 0, temporaries = 0, region = 0;
  for (const auto& m : par.models) {
    kept += double(m->kept_activation_bytes());
    temporaries += double(m->temporary_activation_bytes());
    region += double(m->recompute_region_bytes());
  }
  std::printf(
      "activations: %.1f MB kept from forward to backward, %.1f MB temporaries, %.1f MB "
      "the region recomputed layers share\n",
      kept / 1048576.0, temporaries / 1048576.0, region / 1048576.0);
  const RecomputePlan& plan = par.models[0]->recompute_plan();
  if (plan.granularity == RecomputeGranularity::kNone) return;
  RecomputeMemory sum;
  for (const auto& m : par.models) {
    const RecomputeMemory& r = m->recompute_memory();
    sum.recomputed_bytes += r.recomputed_bytes;
    sum.region_bytes += r.region_bytes;
    for (int k = 0; k < kRecomputeModules; ++k) sum.module_bytes[k] += r.module_bytes[k];
  }
  const double MB = 1048576.0;
  std::printf("recompute: %s: %.1f MB of activations made again before backward instead of kept",
              plan.describe().c_str(), double(sum.recomputed_bytes) / MB);
  if (plan.granularity == RecomputeGranularity::kSelective) {
    std::printf(" (");
    const std::vector<RecomputeModule> mods = plan.modules.list();
    for (size_t k = 0; k < mods.size(); ++k)
      std::printf("%s%s %.1f", k ? ", " : "", recompute_module_name(mods[k]),
                  double(sum.module_bytes[int(mods[k])]) / MB);
    std::printf(")");
  }
  std::printf(", sharing a %.1f MB region: saves %.1f MB\n", double(sum.region_bytes) / MB,
              double(sum.recomputed_bytes - sum.region_bytes) / MB);
}

}  // namespace

void print_run_header(const RunHeader& h) {
  const TrainOptions& o = *h.options;
  const ModelConfig& cfg = *h.config;
  ParallelRun& par = *h.run;
  const int64_t DP = par.dp, B = o.data.micro_batch, T = o.data.seq, A = o.data.grad_accum;
  const int threads = ops::num_threads();
  std::printf("moet train: %s, %.1fM parameters, %.1f MFLOP/token, %d thread%s",
              o.model_path.c_str(), double(count_parameters(cfg)) / 1e6, h.flops_per_token / 1e6,
              threads, threads == 1 ? "" : "s");
  if (h.world_size > 1) std::printf(" per rank x %d ranks", h.world_size);
  std::printf("\n");
  if (h.world_size > 1) print_layout(h, DP);
  const PrecisionPolicy& precision = h.recipe.policy;
  const ops::Format main =
      precision.decoder(cfg.num_hidden_layers / 2, cfg.num_hidden_layers).fprop;
  std::printf("precision: %s", recipe_name(precision.recipe));
  if (recipe_traits(precision.recipe).bf16_edge_layers)
    std::printf(" (%s bf16)", precision.bf16_edge_words().c_str());
  if (!h.recipe.auto_why.empty()) std::printf(" | %s", h.recipe.auto_why.c_str());
  // (auto's line gives the measured speeds that also chose where the GEMMs run)
  std::printf(" | %s\n", ops::kernel_description(main, h.recipe.auto_why.empty()).c_str());
  if (!h.recipe.other.empty()) std::printf("precision: %s\n", h.recipe.other.c_str());
  std::printf("data: %s\n", h.data.c_str());
  if (o.parallel.deterministic)  // whether a --tp layout gives these bits (docs/parallel.md)
    std::printf(
        "deterministic: %s\n",
        par.model().tensor_parallel().invariant
            ? str("TP-invariant sums (", TensorParallel::kPieces, " pieces): every --tp dividing ",
                  TensorParallel::kPieces, " gives these bits")
                  .c_str()
            : "plain sums over split dimensions (a --tp layout would differ in the last "
              "bits: the model's heads, FFN or vocabulary do not divide into pieces, or "
              "the recipe is not fp32 or bf16)");
  const int64_t seqs = DP * A * B;
  std::printf("global batch: micro-batch %lld x grad-accum %lld", (long long)B, (long long)A);
  if (h.world_size > 1) std::printf(" x dp %lld", (long long)DP);
  std::printf(" = %lld sequences of %lld tokens = %lld tokens per step\n", (long long)seqs,
              (long long)T, (long long)(seqs * T));
  std::printf("%s%s\n", h.peaks.describe().c_str(), h.world_size > 1 ? " per rank" : "");
  std::printf("memory: %s (process before the model: %.0f MB)\n", h.memory.describe().c_str(),
              double(h.rss_before_model) / 1048576.0);
  print_recompute(par);
  if (par.pipeline) {
    const PipelineScheduleSpec& spec = par.pipeline->spec();
    // the zero-bubble and V schedules: their lists run with equal stages (B = 2F, W = B/2)
    const bool classic =
        spec.kind == PipelineScheduleKind::kInterleaved || spec.kind == PipelineScheduleKind::k1F1B;
    std::printf(
        "pipeline: %s, %lld stages x %lld chunks, %lld micro-batches; bubble %s = %.3f; "
        "activations (micro-batches in flight per chunk):",
        classic && spec.chunks == 1 ? "1f1b" : pipeline_schedule_name(spec.kind),
        (long long)spec.stages, (long long)spec.chunks, (long long)spec.microbatches,
        classic ? "(P-1)/(V*M)" : "with equal stages (B = 2F = 2W)",
        classic ? double(spec.stages - 1) / double(spec.chunks * spec.microbatches)
                : simulate_pipeline(spec, 1.0, 2.0).bubble_fraction);
    for (int64_t r = 0; r < spec.stages; ++r) {
      // stage r's first rank (the pipeline is the grid's outermost dimension)
      const size_t first = size_t(r * DP * o.parallel.tp);
      std::printf(" stage %lld %.1f MB (", (long long)r,
                  double(h.activations_per_rank[first]) / 1048576.0);
      const std::vector<int64_t> slots = PipelineExecutor::slots_per_chunk(spec, r);
      for (size_t c = 0; c < slots.size(); ++c)
        std::printf("%s%lld", c ? "," : "", (long long)slots[c]);
      std::printf(")%s", r + 1 < spec.stages ? ";" : "\n");
    }
    if (spec.kind == PipelineScheduleKind::kDualPipeV)
      std::printf(
          "dualpipev: %lld of rank 0's %lld backward passes run overlapped with a forward\n",
          (long long)par.pipeline->combined_pairs(), (long long)(spec.microbatches * spec.chunks));
    else if (spec.ep_overlap)
      std::printf(
          "combined 1F1B: %lld of rank 0's %lld backward passes run combined with a "
          "forward\n",
          (long long)par.pipeline->combined_pairs(), (long long)(spec.microbatches * spec.chunks));
  }
  if (!h.resume_dir.empty())
    std::printf("resumed from %s at step %lld\n", h.resume_dir.c_str(), (long long)h.first_step);
  else if (!o.checkpoint.init_from.empty())
    std::printf("weights from %s\n", o.checkpoint.init_from.c_str());
  if (h.saving)
    std::printf("checkpoints: %s, %s%s at the end and on SIGTERM/SIGINT (%s)\n",
                o.checkpoint.out_dir.c_str(),
                o.checkpoint.save_every > 0
                    ? ("every " + std::to_string(o.checkpoint.save_every) + " steps").c_str()
                    : "",
                o.checkpoint.save_every > 0 ? "," : "",
                o.checkpoint.sync_save ? "written synchronously" : "async");
  std::fflush(stdout);
}

}  // namespace moet

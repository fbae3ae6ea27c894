#include "train/option_fields.h"

#include <algorithm>
#include <sstream>

#include "core/choices.h"
#include "core/error.h"
#include "core/overloaded.h"

namespace moet {

namespace {

template <typename T>
constexpr bool kIsList = false;
template <typename T>
constexpr bool kIsList<std::vector<T>> = true;
template <typename T>
constexpr bool kIsOptional = false;
template <typename T>
constexpr bool kIsOptional<std::optional<T>> = true;

// A ChoiceRef for a member M holding words of `c`: an enum E, a list of E, or an optional E whose
// unset value has no word (its words E's). M = E = std::optional<Recipe> is an enum whose choices
// name the unset value ("auto").
template <typename M, typename E>
ChoiceRef words(M& (*get)(TrainOptions&), const std::vector<std::pair<std::string, E>>& c) {
  constexpr bool list = kIsList<M>, nullable = kIsOptional<M> && !std::is_same_v<M, E>;
  ChoiceRef r;
  r.list = list, r.nullable = nullable;
  for (const auto& [w, v] : c) r.words.push_back(w);
  r.get = [get, &c](const TrainOptions& o) {
    const M& m = get(const_cast<TrainOptions&>(o));
    std::vector<std::string> out;
    if constexpr (list) {
      for (const E& v : m) out.push_back(choice_name(c, v));
    } else if constexpr (nullable) {
      if (m) out.push_back(choice_name(c, *m));
    } else {
      out.push_back(choice_name(c, m));
    }
    return out;
  };
  r.set = [get, &c](TrainOptions& o, const std::vector<std::string>& ws) -> std::string {
    std::vector<E> values;
    for (const std::string& word : ws) {
      auto it = std::find_if(c.begin(), c.end(), [&](const auto& p) { return p.first == word; });
      if (it == c.end()) return word;
      values.push_back(it->second);
    }
    if constexpr (list)
      get(o) = values;
    else if (!values.empty())
      get(o) = values[0];
    return "";
  };
  return r;
}

// The row of a member: MOET_OPTION(group, key, member, flags, style, help).
#define MOET_OPTION(group, key, member, flags, style, help)                                        \
  OptionField {                                                                                    \
    group, key, flags, FlagStyle::style, help, +[](TrainOptions & o) -> auto& { return o.member; } \
  }
#define MOET_REF(member)           \
  +[](TrainOptions & o) -> auto& { \
    return o.member;               \
  }

// The model and the data.
std::vector<OptionField> data_fields() {
  return {
      MOET_OPTION("", "model", model_path, "--model", kRequired,
                  "Hugging Face config.json of the model"),
      MOET_OPTION("data", "data", data.spec, "--data", kValue,
                  "training text file or directory, a Megatron PREFIX (PREFIX.bin/.idx, e.g. from "
                  "moet data prepare), a blend \"0.7 PREFIX_A 0.3 PREFIX_B\", or 'mock' for random "
                  "tokens (default: the English corpus of Debian's fortunes package)"),
      MOET_OPTION("data", "tokenizer", data.tokenizer, "--tokenizer", kValue,
                  "tokenizer of text data: 'byte' (the default) or a Hugging Face tokenizer.json; "
                  "Megatron data use the one moet data prepare recorded beside them (a --tokenizer "
                  "given must be that one). Kept in --out as tokenizer.json, where moet generate, "
                  "eval and export-hf find it"),
      MOET_OPTION("data", "split", data.split, "--split", kValueShown,
                  "train,validation[,test] shares of the documents (the validation part is held "
                  "out for evaluation)"),
      {"data", "doc_boundary", "--doc-boundary", FlagStyle::kValueShown,
       "plain-text data: documents end at lines that are exactly '%' (percent, the fortune "
       "format), at blank lines (blank-line), or at the end of each file (file); JSONL files "
       "hold one document a line (docs/data.md)",
       words(MOET_REF(data.doc_boundary), doc_boundary_choices())},
      MOET_OPTION("data", "json_key", data.json_key, "--json-key", kValueShown,
                  "JSONL data: the field of each line's object holding its document (Megatron's "
                  "--json-keys)"),
      MOET_OPTION(
          "data", "prefetch", data.prefetch, "--prefetch", kValueShown,
          "steps of batches a background thread prepares ahead (0: on the training thread)"),
      MOET_OPTION("data", "micro_batch", data.micro_batch, "--micro-batch", kValueShown,
                  "sequences per micro-batch"),
      MOET_OPTION("data", "seq", data.seq, "--seq", kValueShown,
                  "sequence length (default 256, or the model's max_position_embeddings when "
                  "that is less)"),
      MOET_OPTION("data", "grad_accum", data.grad_accum, "--grad-accum", kValueShown,
                  "micro-batches per step"),
      MOET_OPTION("data", "seed", data.seed, "--seed", kValueShown,
                  "seed of the initialisation, and of the data order unless --data-seed is given"),
      MOET_OPTION("data", "data_seed", data.data_seed, "--data-seed", kValue,
                  "seed of the data order alone (which samples, in which order; the held-out "
                  "data never depend on it): runs that differ only in it measure data noise"),
  };
}

// The schedule, the optimizer and the loss weights.
std::vector<OptionField> optim_fields() {
  return {
      MOET_OPTION("optim", "steps", optim.steps, "--steps", kValueShown, "optimizer steps"),
      MOET_OPTION("optim", "lr", optim.lr, "--lr", kValueShown, "peak learning rate"),
      MOET_OPTION("optim", "min_lr", optim.min_lr, "--min-lr", kValue,
                  "final learning rate of the cosine, in [0, lr] (default lr/10)"),
      MOET_OPTION("optim", "warmup", optim.warmup, "--warmup", kValue,
                  "warm-up steps, at most --steps (default min(200, steps/10))"),
      {"optim", "schedule", "--schedule", FlagStyle::kValueShown, "cosine or constant",
       words(MOET_REF(optim.schedule), schedule_choices())},
      MOET_OPTION("optim", "override_opt_param_scheduler", optim.override_opt_param_scheduler,
                  "--override-opt-param-scheduler", kValue,
                  "resume under a learning-rate schedule (--lr, --min-lr, --warmup, --steps, "
                  "--schedule) other than the checkpoint's (as Megatron's flag; refused "
                  "otherwise)"),
      MOET_OPTION("optim", "weight_decay", optim.weight_decay, "--weight-decay", kValueShown,
                  "AdamW weight decay"),
      MOET_OPTION("optim", "grad_clip", optim.grad_clip, "--grad-clip", kValueShown,
                  "global gradient-norm clip (0: off)"),
      MOET_OPTION("optim", "mtp_lambda", optim.mtp_lambda, "--mtp-lambda", kValueShown,
                  "MTP loss weight"),
      MOET_OPTION("optim", "balance_alpha", optim.balance_alpha, "--balance-alpha", kValueShown,
                  "sequence-wise balance loss weight"),
      MOET_OPTION("optim", "z_loss_coef", optim.z_loss_coef, "--z-loss", kValueShown,
                  "router z-loss weight"),
      MOET_OPTION("optim", "bias_update_rate", optim.bias_update_rate, "--bias-update-rate",
                  kValueShown,
                  "aux-loss-free expert bias update rate gamma (DeepSeek-V3: 0.001; "
                  "docs/training.md)"),
      MOET_OPTION("optim", "use_precision_aware_optimizer", optim.use_precision_aware_optimizer,
                  "--use-precision-aware-optimizer", kValue,
                  "let --exp-avg-dtype and --exp-avg-sq-dtype store AdamW's moments in bf16 "
                  "(Megatron's flag; the update is computed in fp32)"),
      {"optim", "exp_avg_dtype", "--exp-avg-dtype", FlagStyle::kValueShown,
       "with --use-precision-aware-optimizer: fp32 or bf16, how AdamW's first moment is stored "
       "(rounded to nearest even after each step; checkpointed so)",
       words(MOET_REF(optim.exp_avg_dtype), moment_dtype_choices())},
      {"optim", "exp_avg_sq_dtype", "--exp-avg-sq-dtype", FlagStyle::kValueShown,
       "with --use-precision-aware-optimizer: fp32 or bf16, how AdamW's second moment is stored",
       words(MOET_REF(optim.exp_avg_sq_dtype), moment_dtype_choices())},
  };
}

// The recipe.
std::vector<OptionField> precision_fields() {
  return {
      {"precision", "precision", "--precision", FlagStyle::kValueShown,
       "fp32, bf16, mxfp8, fp8-blockwise, nvfp4, mxfp4, or auto (the faster of bf16 and fp32 "
       "on this CPU at the model's shapes, measured once and cached)",
       words(MOET_REF(precision.recipe), precision_choices())},
      MOET_OPTION("precision", "bf16_layers", precision.bf16_layers, "--bf16-layers", kValueShown,
                  "FP8 and FP4 recipes: the first N decoder layers (and the last N, unless "
                  "--bf16-layers-end) run in bf16"),
      MOET_OPTION("precision", "bf16_layers_end", precision.bf16_layers_end, "--bf16-layers-end",
                  kValue,
                  "FP8 and FP4 recipes: the last N decoder layers run in bf16 (default: as "
                  "--bf16-layers; NVIDIA's NVFP4 run kept the first 2 and the last 8)"),
  };
}

// Activation recomputation.
std::vector<OptionField> recompute_fields() {
  return {
      {"recompute", "granularity", "--recompute-granularity", FlagStyle::kValueShown,
       "activation recomputation (as Megatron's): selective (the modules of "
       "--recompute-modules) or full (whole decoder layers, --recompute-method); bit for bit "
       "what none trains (docs/training.md, Memory)",
       words(MOET_REF(recompute.granularity), recompute_granularity_choices())},
      {"recompute", "modules", "--recompute-modules", FlagStyle::kValue,
       "with --recompute-granularity selective: core_attn, mla_up_proj, moe_act, layernorm, mlp, "
       "moe, shared_experts (default core_attn)",
       words(MOET_REF(recompute.modules), recompute_module_choices())},
      {"recompute", "method", "--recompute-method", FlagStyle::kValue,
       "with --recompute-granularity full: uniform (every layer, in groups of "
       "--recompute-num-layers) or block (the first --recompute-num-layers layers of each "
       "pipeline chunk); default uniform",
       words(MOET_REF(recompute.method), recompute_method_choices())},
      MOET_OPTION("recompute", "num_layers", recompute.num_layers, "--recompute-num-layers", kValue,
                  "with --recompute-granularity full: layers per group (uniform) or recomputed "
                  "layers per chunk (block); default 1"),
  };
}

// The layout and the threads.
std::vector<OptionField> parallel_fields() {
  return {
      MOET_OPTION("parallel", "threads", parallel.threads, "--threads", kValue,
                  "threads (default: all cores)"),
      MOET_OPTION("parallel", "tp", parallel.tp, "--tp", kValueShown,
                  "tensor-parallel size (Megatron's --tensor-model-parallel-size; under mpirun): "
                  "attention heads, dense MLPs, shared experts and the vocabulary split over tp "
                  "consecutive ranks (models without MoE layers: docs/parallel.md)"),
      MOET_OPTION("parallel", "sequence_parallel", parallel.sequence_parallel,
                  "--sequence-parallel", kValue,
                  "with --tp: the residual stream, the norms and the embedding's output in token "
                  "shards over the tensor-parallel ranks, all-gathered before the column-parallel "
                  "linears and reduce-scattered after the row-parallel ones (Megatron's "
                  "--sequence-parallel; models without MTP modules: docs/parallel.md)"),
      MOET_OPTION("parallel", "ep", parallel.ep, "--ep", kValueShown,
                  "expert-parallel size: ranks per expert group (under mpirun)"),
      MOET_OPTION("parallel", "a2a_overlap", parallel.a2a_overlap, "--a2a-overlap", kValue,
                  "split each micro-batch in two halves whose stages interleave, so one half's "
                  "all-to-alls travel under the other half's compute; under --pp, combined 1F1B: "
                  "a forward and another micro-batch's backward interleave"),
      MOET_OPTION("parallel", "delay_wgrad_compute", parallel.delay_wgrad_compute,
                  "--delay-wgrad-compute", kValue,
                  "in a combined pass (--a2a-overlap under --pp, dualpipev's F&B pairs) each "
                  "backward stage's weight gradients run after its input gradients, under the "
                  "all-to-all it started (Megatron's name; the same bits)"),
      MOET_OPTION("parallel", "pp", parallel.pp, "--pp", kValueShown,
                  "pipeline stages (under mpirun; the world is pp x data-parallel ranks, the "
                  "pipeline outermost as in Megatron)"),
      MOET_OPTION("parallel", "vpp", parallel.vpp, "--vpp", kValueShown,
                  "model chunks (virtual stages) per pipeline stage: interleaved 1F1B when > 1"),
      MOET_OPTION("parallel", "pp_layout", parallel.pp_layout, "--pp-layout", kValue,
                  "Megatron's pipeline layout, e.g. \"Et*2|t*2|t*2|t*2mL\" (default: the decoder "
                  "layers split evenly over pp x vpp stages)"),
      MOET_OPTION("parallel", "zero1", parallel.zero1, "--zero1", kValue,
                  "ZeRO-1: shard the AdamW moments over the data-parallel ranks (bitwise the same "
                  "training)"),
      MOET_OPTION("parallel", "deterministic", parallel.deterministic, "--deterministic", kValue,
                  "one sequence at a time, gradients added in a fixed tree order, GEMMs in "
                  "thread-independent tiles: N ranks x T threads give bit for bit what one "
                  "process on any thread count gives with an N-times larger micro-batch"),
      MOET_OPTION("parallel", "ep_ranks_per_node", parallel.ep_ranks_per_node,
                  "--ep-ranks-per-node", kValue,
                  "ranks of an expert-parallel group that share a node (for bytes across nodes; "
                  "n_group = nodes makes routing node-limited)"),
      {"parallel", "dispatcher", "--dispatcher", FlagStyle::kValueShown,
       "expert token exchange with --ep > 1: alltoall or allgather",
       words(MOET_REF(parallel.dispatcher), dispatcher_choices())},
      {"parallel", "pipeline_schedule", "--pipeline-schedule", FlagStyle::kValueShown,
       "with --pp: interleaved (1F1B when --vpp is 1), 1f1b, zb1p (zero-bubble ZB-H1: each "
       "backward as its input gradient, then its weight gradient where the stage would wait), "
       "zbv or dualpipev (two chunks per rank in a V; DeepSeek's DualPipeV overlaps a forward "
       "with another micro-batch's backward); TorchTitan's names too (docs/pipeline.md)",
       words(MOET_REF(parallel.pipeline_schedule), pipeline_schedule_choices())},
      {"parallel", "overlap", "--overlap", FlagStyle::kValueShown,
       "run the all-to-alls and gradient reductions on a communication thread behind compute: "
       "auto (when a core is free for it), on, off",
       words(MOET_REF(parallel.overlap), overlap_choices())},
  };
}

// Checkpoints.
std::vector<OptionField> checkpoint_fields() {
  return {
      MOET_OPTION("checkpoint", "out", checkpoint.out_dir, "--out", kValue,
                  "run directory for checkpoints (step-NNNNNNN/ and a 'latest' pointer); a run "
                  "with --out saves at the end and on SIGTERM/SIGINT"),
      MOET_OPTION("checkpoint", "save_every", checkpoint.save_every, "--save-every", kValueShown,
                  "steps between checkpoints (0: only at the end)"),
      MOET_OPTION("checkpoint", "keep_last", checkpoint.keep_last, "--keep-last", kValueShown,
                  "keep only the newest K checkpoints (0: all)"),
      MOET_OPTION("checkpoint", "resume", checkpoint.resume, "--resume", kValue,
                  "'auto' (the latest checkpoint in --out, or a fresh start), a run directory "
                  "(its latest checkpoint) or a step-NNNNNNN directory"),
      MOET_OPTION("checkpoint", "sync_save", checkpoint.sync_save, "--sync-save", kValue,
                  "write checkpoints on the training thread (default: in the background)"),
      MOET_OPTION("checkpoint", "skip_nonfinite", checkpoint.skip_nonfinite, "--skip-nonfinite",
                  kValueShown,
                  "skip up to N steps whose loss is NaN or Inf (default 0: stop at the first)"),
      MOET_OPTION("checkpoint", "init_from", checkpoint.init_from, "--init-from", kValue,
                  "start from the weights of a checkpoint or a Hugging Face directory (fresh "
                  "optimizer, step 0)"),
  };
}

// What the run reports.
std::vector<OptionField> logging_fields() {
  return {
      MOET_OPTION("logging", "metrics", logging.metrics_path, "--metrics", kValue,
                  "write one JSON object per step to this file (default with --out RUN: "
                  "RUN/metrics.jsonl)"),
      MOET_OPTION("logging", "overwrite", logging.overwrite, "--overwrite,--overwrite-metrics",
                  kValue,
                  "replace existing --metrics and --trace files (an empty one is replaced "
                  "anyway)"),
      MOET_OPTION("logging", "tensorboard", logging.tensorboard_dir, "--tensorboard",
                  kOptionalValue,
                  "write TensorBoard event files into this directory (tags as Megatron's; "
                  "docs/metrics.md); without one, into RUN/tensorboard of --out RUN"),
      MOET_OPTION("logging", "log_expert_load", logging.log_expert_load, "--log-expert-load",
                  kValueShown,
                  "every N steps, the tokens each routed expert received per MoE layer, into "
                  "--metrics and --tensorboard (0: never)"),
      MOET_OPTION("logging", "log_every", logging.log_every, "--log-every", kValueShown,
                  "steps between progress lines"),
      MOET_OPTION("logging", "eval_every", logging.eval_every, "--eval-every", kValue,
                  "steps between held-out evaluations (0: at the end)"),
      MOET_OPTION("logging", "eval_batches", logging.eval_batches, "--eval-batches", kValueShown,
                  "held-out micro-batches per evaluation"),
      MOET_OPTION("logging", "peak_tflops", logging.peak_tflops, "--peak-tflops", kValue,
                  "peak TFLOP/s that MFU divides by, positive (default: the measured GEMM peak)"),
      MOET_OPTION("logging", "quiet", logging.quiet, "--quiet", kValue, "no progress lines"),
      MOET_OPTION("logging", "trace", logging.trace_path, "--trace", kValue,
                  "write a Perfetto/Chrome trace (compute and comm lanes), FILE.rankN.json per "
                  "rank"),
  };
}

std::vector<OptionField> make_fields() {
  std::vector<OptionField> all;
  for (auto group : {data_fields, optim_fields, precision_fields, recompute_fields, parallel_fields,
                     checkpoint_fields, logging_fields})
    for (OptionField& f : group()) all.push_back(std::move(f));
  return all;
}

#undef MOET_OPTION
#undef MOET_REF

}  // namespace

const std::vector<OptionField>& train_option_fields() {
  static const std::vector<OptionField> fields = make_fields();
  return fields;
}

nlohmann::json option_json(const OptionField& f, const TrainOptions& o) {
  TrainOptions& m = const_cast<TrainOptions&>(o);  // the refs read only here
  return std::visit(Overloaded{[&](const ChoiceRef& c) -> nlohmann::json {
                                 const std::vector<std::string> w = c.get(o);
                                 if (c.list) return w;
                                 return w.empty() ? nlohmann::json(nullptr) : nlohmann::json(w[0]);
                               },
                               [&](auto ref) -> nlohmann::json {
                                 const auto& v = ref(m);
                                 using T = std::decay_t<decltype(v)>;
                                 if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                                               std::is_same_v<T, std::optional<uint64_t>> ||
                                               std::is_same_v<T, std::optional<double>>)
                                   return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
                                 else
                                   return nlohmann::json(v);
                               }},
                    f.access);
}

void set_option_from_json(const OptionField& f, TrainOptions& o, const nlohmann::json& x,
                          const std::string& where) {
  if (x.is_null()) return;
  const std::string at =
      where + ": options." + (*f.group ? std::string(f.group) + "." : "") + f.key;
  auto scalar = [&](auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, bool>) {
      MOET_CHECK(x.is_boolean(), at, " is not true or false: ", x.dump());
    } else if constexpr (std::is_same_v<T, std::string>) {
      MOET_CHECK(x.is_string(), at, " is not a string: ", x.dump());
    } else if constexpr (std::is_integral_v<T>) {
      MOET_CHECK(std::is_signed_v<T> ? x.is_number_integer() : x.is_number_unsigned(), at,
                 " is not an integer", std::is_signed_v<T> ? "" : " >= 0", ": ", x.dump());
    } else {
      MOET_CHECK(x.is_number(), at, " is not a number: ", x.dump());
    }
    v = x.get<T>();
  };
  std::visit(Overloaded{[&](const ChoiceRef& c) {
                          std::vector<std::string> words;
                          if (c.list) {
                            MOET_CHECK(x.is_array(), at, " is not a list: ", x.dump());
                            for (const nlohmann::json& w : x) {
                              MOET_CHECK(w.is_string(), at, " holds a non-string: ", w.dump());
                              words.push_back(w.get<std::string>());
                            }
                          } else {
                            MOET_CHECK(x.is_string(), at, " is not a string: ", x.dump());
                            words.push_back(x.get<std::string>());
                          }
                          const std::string bad = c.set(o, words);
                          std::string names;
                          for (const std::string& w : c.words)
                            names += (names.empty() ? "" : ", ") + w;
                          MOET_CHECK(bad.empty(), at, " '", bad, "' is not one of ", names);
                        },
                        [&](auto ref) {
                          auto& v = ref(o);
                          using T = std::decay_t<decltype(v)>;
                          if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                                        std::is_same_v<T, std::optional<uint64_t>> ||
                                        std::is_same_v<T, std::optional<double>>) {
                            typename T::value_type t{};
                            scalar(t);
                            v = t;
                          } else {
                            scalar(v);
                          }
                        }},
             f.access);
}

std::string train_options_markdown() {
  const TrainOptions defaults;
  std::ostringstream md;
  md << "| flag | run.json | default |\n|---|---|---|\n";
  for (const OptionField& f : train_option_fields()) {
    if (f.style == FlagStyle::kNone) continue;
    std::string flags = f.flags;
    for (size_t at = flags.find(','); at != std::string::npos; at = flags.find(',', at + 4))
      flags.replace(at, 1, "`, `");
    const nlohmann::json d = option_json(f, defaults);
    std::string shown = d.is_null() ? "unset" : d.is_string() ? d.get<std::string>() : d.dump();
    if (f.style == FlagStyle::kRequired) shown = "required";
    if (shown.empty()) shown = "\"\"";
    md << "| `" << flags << "` | `" << (*f.group ? std::string(f.group) + "." : "") << f.key
       << "` | " << shown << " |\n";
  }
  return md.str();
}

}  // namespace moet

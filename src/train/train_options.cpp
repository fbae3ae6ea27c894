#include "train/train_options.h"

#include "core/choices.h"
#include "core/error.h"

namespace moet {

namespace {

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

const std::vector<std::pair<std::string, OverlapMode>>& overlap_choices() {
  static const std::vector<std::pair<std::string, OverlapMode>> c = {
      {"auto", OverlapMode::kAuto}, {"on", OverlapMode::kOn}, {"off", OverlapMode::kOff}};
  return c;
}

const std::vector<std::pair<std::string, DispatcherKind>>& dispatcher_choices() {
  static const std::vector<std::pair<std::string, DispatcherKind>> c = {
      {"alltoall", DispatcherKind::kAllToAll}, {"allgather", DispatcherKind::kAllGather}};
  return c;
}

const std::vector<std::pair<std::string, LrSchedule::Kind>>& schedule_choices() {
  static const std::vector<std::pair<std::string, LrSchedule::Kind>> c = {
      {"cosine", LrSchedule::Kind::Cosine}, {"constant", LrSchedule::Kind::Constant}};
  return c;
}

const std::vector<std::pair<std::string, std::optional<Recipe>>>& precision_choices() {
  static const std::vector<std::pair<std::string, std::optional<Recipe>>> c = [] {
    std::vector<std::pair<std::string, std::optional<Recipe>>> v = {{"auto", std::nullopt}};
    for (Recipe r : {Recipe::FP32, Recipe::BF16, Recipe::MXFP8, Recipe::FP8Blockwise})
      v.emplace_back(recipe_name(r), r);
    return v;
  }();
  return c;
}

const char* overlap_name(OverlapMode m) { return choice_name(overlap_choices(), m); }
const char* dispatcher_name(DispatcherKind d) { return choice_name(dispatcher_choices(), d); }
const char* schedule_name(LrSchedule::Kind k) { return choice_name(schedule_choices(), k); }

PrecisionPolicy PrecisionOptions::policy() const { return resolve_precision(name(), bf16_layers); }

std::string PrecisionOptions::name() const { return recipe ? recipe_name(*recipe) : "auto"; }

RecomputePlan RecomputeOptions::plan() const {
  RecomputePlan p;
  p.granularity = granularity;
  if (granularity == RecomputeGranularity::kSelective) {
    for (RecomputeModule m : modules) p.modules.add(m);
    if (p.modules.empty()) p.modules.add(RecomputeModule::kCoreAttn);
  }
  p.method = method.value_or(RecomputeMethod::kUniform);
  p.num_layers = num_layers.value_or(1);
  return p;
}

nlohmann::json to_json(const TrainOptions& o) {
  const DataOptions& d = o.data;
  const OptimizerOptions& p = o.optim;
  const ParallelOptions& l = o.parallel;
  const CheckpointOptions& c = o.checkpoint;
  const LoggingOptions& g = o.logging;
  const RecomputeOptions& r = o.recompute;
  nlohmann::json modules = nlohmann::json::array();
  for (RecomputeModule m : r.modules) modules.push_back(recompute_module_name(m));
  return {
      {"model", o.model_path},
      {"data",
       {{"data", d.spec},
        {"tokenizer", d.tokenizer},
        {"split", d.split.empty() ? "95,5" : d.split},
        {"doc_boundary", doc_boundary_name(d.doc_boundary)},
        {"json_key", d.json_key},
        {"prefetch", d.prefetch},
        {"micro_batch", d.micro_batch},
        {"seq", d.seq},
        {"grad_accum", d.grad_accum},
        {"seed", d.seed},
        {"data_seed", d.data_seed ? nlohmann::json(*d.data_seed) : nlohmann::json(nullptr)}}},
      {"optim",
       {{"steps", p.steps},
        {"lr", p.lr},
        {"min_lr", optional_json(p.min_lr)},
        {"warmup", p.warmup ? nlohmann::json(*p.warmup) : nlohmann::json(nullptr)},
        {"schedule", schedule_name(p.schedule)},
        {"override_opt_param_scheduler", p.override_opt_param_scheduler},
        {"weight_decay", p.weight_decay},
        {"grad_clip", p.grad_clip},
        {"mtp_lambda", p.mtp_lambda},
        {"balance_alpha", p.balance_alpha},
        {"z_loss_coef", p.z_loss_coef},
        {"bias_update_rate", p.bias_update_rate}}},
      {"precision", {{"precision", o.precision.name()}, {"bf16_layers", o.precision.bf16_layers}}},
      {"parallel",
       {{"threads", l.threads},
        {"ep", l.ep},
        {"ep_ranks_per_node", l.ep_ranks_per_node},
        {"overlap", overlap_name(l.overlap)},
        {"dispatcher", dispatcher_name(l.dispatcher)},
        {"a2a_overlap", l.a2a_overlap},
        {"zero1", l.zero1},
        {"pp", l.pp},
        {"vpp", l.vpp},
        {"pp_layout", l.pp_layout},
        {"deterministic", l.deterministic}}},
      {"recompute",
       {{"granularity", recompute_granularity_name(r.granularity)},
        {"modules", modules},
        {"method",
         r.method ? nlohmann::json(recompute_method_name(*r.method)) : nlohmann::json(nullptr)},
        {"num_layers", r.num_layers ? nlohmann::json(*r.num_layers) : nlohmann::json(nullptr)}}},
      {"checkpoint",
       {{"out", c.out_dir},
        {"save_every", c.save_every},
        {"keep_last", c.keep_last},
        {"resume", c.resume},
        {"sync_save", c.sync_save},
        {"skip_nonfinite", c.skip_nonfinite},
        {"init_from", c.init_from}}},
      {"logging",
       {{"metrics", g.metrics_path},
        {"overwrite", g.overwrite},
        {"log_every", g.log_every},
        {"tensorboard", g.tensorboard_dir},
        {"log_expert_load", g.log_expert_load},
        {"eval_every", g.eval_every},
        {"eval_batches", g.eval_batches},
        {"peak_tflops", optional_json(g.peak_tflops)},
        {"quiet", g.quiet},
        {"trace", g.trace_path}}},
  };
}

namespace {

// Reads the keys of one group of to_json's object; absent and null keys keep their defaults.
class GroupReader {
 public:
  GroupReader(const nlohmann::json& j, const char* group, const std::string& where)
      : where_(where + ": options." + group) {
    if (j.contains(group)) {
      MOET_CHECK(j[group].is_object(), where_, " is not an object");
      j_ = &j[group];
    }
  }

  template <typename T>
  void operator()(const char* key, T& v) const {
    const nlohmann::json* x = value(key);
    if (!x) return;
    if constexpr (std::is_same_v<T, bool>) {
      MOET_CHECK(x->is_boolean(), where_, ".", key, " is not true or false: ", x->dump());
      v = x->get<bool>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      MOET_CHECK(x->is_string(), where_, ".", key, " is not a string: ", x->dump());
      v = x->get<std::string>();
    } else if constexpr (std::is_integral_v<T>) {
      MOET_CHECK(std::is_signed_v<T> ? x->is_number_integer() : x->is_number_unsigned(), where_,
                 ".", key, " is not an integer", std::is_signed_v<T> ? "" : " >= 0", ": ",
                 x->dump());
      v = x->get<T>();
    } else {
      MOET_CHECK(x->is_number(), where_, ".", key, " is not a number: ", x->dump());
      v = x->get<T>();
    }
  }

  template <typename T>
  void operator()(const char* key, std::optional<T>& v) const {
    if (!value(key)) return;
    T t{};
    (*this)(key, t);
    v = t;
  }

  template <typename E>
  void choice(const char* key, E& v, const std::vector<std::pair<std::string, E>>& choices) const {
    std::string word;
    (*this)(key, word);
    if (value(key)) v = word_of(key, word, choices);
  }

  template <typename E>
  void choice(const char* key, std::optional<E>& v,
              const std::vector<std::pair<std::string, E>>& choices) const {
    std::string word;
    (*this)(key, word);
    if (value(key)) v = word_of(key, word, choices);
  }

  // A list of words.
  template <typename E>
  void choices(const char* key, std::vector<E>& v,
               const std::vector<std::pair<std::string, E>>& choices) const {
    const nlohmann::json* x = value(key);
    if (!x) return;
    MOET_CHECK(x->is_array(), where_, ".", key, " is not a list: ", x->dump());
    v.clear();
    for (const nlohmann::json& w : *x) {
      MOET_CHECK(w.is_string(), where_, ".", key, " holds a non-string: ", w.dump());
      v.push_back(word_of(key, w.get<std::string>(), choices));
    }
  }

 private:
  const nlohmann::json* j_ = nullptr;
  std::string where_;
  template <typename E>
  E word_of(const char* key, const std::string& word,
            const std::vector<std::pair<std::string, E>>& choices) const {
    std::string names;
    for (const auto& [name, e] : choices) {
      if (name == word) return e;
      names += (names.empty() ? "" : ", ") + name;
    }
    MOET_FAIL(where_, ".", key, " '", word, "' is not one of ", names);
  }

  const nlohmann::json* value(const char* key) const {
    return j_ && j_->contains(key) && !(*j_)[key].is_null() ? &(*j_)[key] : nullptr;
  }
};

}  // namespace

TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& where) {
  MOET_CHECK(j.is_object(), where, ": options is not an object");
  TrainOptions o;
  if (j.contains("model") && j["model"].is_string()) o.model_path = j["model"].get<std::string>();
  DataOptions& d = o.data;
  const GroupReader data(j, "data", where);
  data("data", d.spec);
  data("tokenizer", d.tokenizer);
  data("split", d.split);
  data.choice("doc_boundary", d.doc_boundary, doc_boundary_choices());
  data("json_key", d.json_key);
  data("prefetch", d.prefetch);
  data("micro_batch", d.micro_batch);
  data("seq", d.seq);
  data("grad_accum", d.grad_accum);
  data("seed", d.seed);
  data("data_seed", d.data_seed);
  OptimizerOptions& p = o.optim;
  const GroupReader optim(j, "optim", where);
  optim("steps", p.steps);
  optim("lr", p.lr);
  optim("min_lr", p.min_lr);
  optim("warmup", p.warmup);
  optim.choice("schedule", p.schedule, schedule_choices());
  optim("override_opt_param_scheduler", p.override_opt_param_scheduler);
  optim("weight_decay", p.weight_decay);
  optim("grad_clip", p.grad_clip);
  optim("mtp_lambda", p.mtp_lambda);
  optim("balance_alpha", p.balance_alpha);
  optim("z_loss_coef", p.z_loss_coef);
  optim("bias_update_rate", p.bias_update_rate);
  const GroupReader precision(j, "precision", where);
  precision.choice("precision", o.precision.recipe, precision_choices());
  precision("bf16_layers", o.precision.bf16_layers);
  ParallelOptions& l = o.parallel;
  const GroupReader parallel(j, "parallel", where);
  parallel("threads", l.threads);
  parallel("ep", l.ep);
  parallel("ep_ranks_per_node", l.ep_ranks_per_node);
  parallel.choice("overlap", l.overlap, overlap_choices());
  parallel.choice("dispatcher", l.dispatcher, dispatcher_choices());
  parallel("a2a_overlap", l.a2a_overlap);
  parallel("zero1", l.zero1);
  parallel("pp", l.pp);
  parallel("vpp", l.vpp);
  parallel("pp_layout", l.pp_layout);
  parallel("deterministic", l.deterministic);
  RecomputeOptions& r = o.recompute;
  const GroupReader recompute(j, "recompute", where);
  recompute.choice("granularity", r.granularity, recompute_granularity_choices());
  recompute.choices("modules", r.modules, recompute_module_choices());
  recompute.choice("method", r.method, recompute_method_choices());
  recompute("num_layers", r.num_layers);
  CheckpointOptions& c = o.checkpoint;
  const GroupReader checkpoint(j, "checkpoint", where);
  checkpoint("out", c.out_dir);
  checkpoint("save_every", c.save_every);
  checkpoint("keep_last", c.keep_last);
  checkpoint("resume", c.resume);
  checkpoint("sync_save", c.sync_save);
  checkpoint("skip_nonfinite", c.skip_nonfinite);
  checkpoint("init_from", c.init_from);
  LoggingOptions& g = o.logging;
  const GroupReader logging(j, "logging", where);
  logging("metrics", g.metrics_path);
  logging("overwrite", g.overwrite);
  logging("log_every", g.log_every);
  logging("tensorboard", g.tensorboard_dir);
  logging("log_expert_load", g.log_expert_load);
  logging("eval_every", g.eval_every);
  logging("eval_batches", g.eval_batches);
  logging("peak_tflops", g.peak_tflops);
  logging("quiet", g.quiet);
  logging("trace", g.trace_path);
  return o;
}

}  // namespace moet

#include "train/train_options.h"

namespace moet {

namespace {

template <typename E>
const char* name_in(const std::vector<std::pair<std::string, E>>& choices, E value) {
  for (const auto& [name, v] : choices)
    if (v == value) return name.c_str();
  return "?";
}

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

const char* overlap_name(OverlapMode m) { return name_in(overlap_choices(), m); }
const char* dispatcher_name(DispatcherKind d) { return name_in(dispatcher_choices(), d); }
const char* schedule_name(LrSchedule::Kind k) { return name_in(schedule_choices(), k); }

PrecisionPolicy PrecisionOptions::policy() const { return resolve_precision(name(), bf16_layers); }

std::string PrecisionOptions::name() const { return recipe ? recipe_name(*recipe) : "auto"; }

nlohmann::json to_json(const TrainOptions& o) {
  const DataOptions& d = o.data;
  const OptimizerOptions& p = o.optim;
  const ParallelOptions& l = o.parallel;
  const CheckpointOptions& c = o.checkpoint;
  const LoggingOptions& g = o.logging;
  return {
      {"model", o.model_path},
      {"data",
       {{"data", d.spec},
        {"tokenizer", d.tokenizer},
        {"split", d.split.empty() ? "95,5" : d.split},
        {"doc_boundary", d.doc_boundary},
        {"json_key", d.json_key},
        {"prefetch", d.prefetch},
        {"micro_batch", d.micro_batch},
        {"seq", d.seq},
        {"grad_accum", d.grad_accum},
        {"seed", d.seed}}},
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

}  // namespace moet

#include "train/checkpointing.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "optim/adamw.h"
#include "parallel/communicator.h"
#include "train/train_options.h"
#include "train/train_options_check.h"

namespace moet {

namespace fs = std::filesystem;

namespace {

// "cosine 1e-03 -> 1e-04, warm-up 4 steps, decay to step 40"
std::string describe_schedule(const std::string& kind, double max, double min, int64_t warmup,
                              int64_t total) {
  char b[160];
  if (kind == "constant")
    std::snprintf(b, sizeof b, "constant %.3g, warm-up %lld steps", max, (long long)warmup);
  else
    std::snprintf(b, sizeof b, "%s %.3g -> %.3g, warm-up %lld steps, decay to step %lld",
                  kind.c_str(), max, min, (long long)warmup, (long long)total);
  return b;
}

// The learning-rate schedule a checkpoint was trained under against the one this run would
// take: "" when they are the same; else a refusal (one line naming what changed and the flag
// that accepts it) unless `override_scheduler`, then the note printed at the resume.
std::string resumed_schedule_change(const nlohmann::json& run, const LrSchedule& now,
                                    const std::string& schedule_name, bool override_scheduler,
                                    int64_t resume_step, const std::string& where) {
  if (!run.contains("lr") || !run["lr"].is_object()) return "";
  const nlohmann::json& lr = run["lr"];
  auto num = [&](const char* k, double dflt) {
    return lr.contains(k) && lr[k].is_number() ? lr[k].get<double>() : dflt;
  };
  const std::string kind = lr.contains("schedule") && lr["schedule"].is_string()
                               ? lr["schedule"].get<std::string>()
                               : schedule_name;
  const double max = num("max", now.max_lr), min = num("min", now.min_lr);
  const int64_t warmup = int64_t(num("warmup", double(now.warmup))),
                total = int64_t(num("total_steps", double(now.total)));
  std::string changed;
  auto differs = [&](const std::string& what, bool d) {
    if (d) changed += (changed.empty() ? "" : ", ") + what;
  };
  differs(str("--schedule ", kind, " -> ", schedule_name), kind != schedule_name);
  differs(str("--lr ", max, " -> ", now.max_lr), max != now.max_lr);
  // a constant rate has no end and no minimum: more --steps continue the same schedule
  const bool constant = kind == "constant" && schedule_name == "constant";
  differs(str("--min-lr ", min, " -> ", now.min_lr), !constant && min != now.min_lr);
  differs(str("--steps ", total, " -> ", now.total), !constant && total != now.total);
  // (nor does a warm-up both have finished by the resume, default ones growing with --steps)
  differs(str("warm-up ", warmup, " -> ", now.warmup, " steps"),
          warmup != now.warmup && !(constant && resume_step >= std::max(warmup, now.warmup)));
  if (changed.empty()) return "";
  MOET_CHECK(override_scheduler, "the learning-rate schedule differs from the one ", where,
             " was trained under (", changed,
             "); pass --override-opt-param-scheduler to continue under the new schedule "
             "(Megatron's flag), or give the run's own values");
  LrSchedule then = now;
  then.kind = parse_schedule_kind(kind);
  then.max_lr = max, then.min_lr = min, then.warmup = warmup, then.total = total;
  return str(
      "the learning-rate schedule changes at step ", resume_step, " (",
      "--override-opt-param-scheduler): was ", describe_schedule(kind, max, min, warmup, total),
      ", now ", describe_schedule(schedule_name, now.max_lr, now.min_lr, now.warmup, now.total),
      "; the rate of the next step goes from ", then.at(resume_step), " to ", now.at(resume_step));
}

}  // namespace

std::optional<TrainOptions> checkpoint_run_options(const nlohmann::json& run,
                                                   const std::string& where) {
  if (!run.is_object()) return std::nullopt;
  if (run.contains("options")) return train_options_from_json(run["options"], where);
  // moet before run.options: the settings as flat fields of run, in to_json's groups
  static const std::vector<std::pair<const char*, std::vector<const char*>>> groups = {
      {"data",
       {"data", "split", "doc_boundary", "json_key", "tokenizer", "micro_batch", "seq",
        "grad_accum"}},
      {"precision", {"bf16_layers"}},
      {"parallel", {"ep", "zero1", "deterministic"}},
      {"logging", {"eval_batches"}}};
  nlohmann::json options = nlohmann::json::object();
  bool any = false;
  for (const auto& [group, keys] : groups)
    for (const char* k : keys)
      if (run.contains(k)) options[group][k] = run[k], any = true;
  if (!any) return std::nullopt;
  return train_options_from_json(options, where);
}

TrainCheckpoints::TrainCheckpoints(const TrainOptions& o, Communicator* world)
    : o_(o), world_(world) {
  // (the flags alone and together: check_train_options)
  if (o.checkpoint.resume == "auto") {
    if (std::optional<std::string> latest = latest_checkpoint(o.checkpoint.out_dir))
      resume_dir_ = *latest;
  } else if (!o.checkpoint.resume.empty()) {
    resume_dir_ = resolve_checkpoint_dir(o.checkpoint.resume);
  }
  if (!resume_dir_.empty()) {
    const CheckpointIndex ix = CheckpointReader(resume_dir_).index();
    resume_step_ = ix.step;
    auto recorded = [&](const char* key) {
      return ix.run.is_object() && ix.run.contains(key) && ix.run[key].is_string()
                 ? ix.run[key].get<std::string>()
                 : std::string();
    };
    recorded_gemm_operands_ = recorded("gemm_operands");
    recorded_precision_ = recorded("precision");
  }
  model_config_ = read_json_file(o.model_path);
  if (o.checkpoint.out_dir.empty()) return;
  MOET_CHECK(!fs::exists(o.checkpoint.out_dir) || fs::is_directory(o.checkpoint.out_dir), "--out '",
             o.checkpoint.out_dir, "' exists and is not a directory");
  const auto existing = list_checkpoints(o.checkpoint.out_dir);
  if (resume_dir_.empty()) {
    MOET_CHECK(
        existing.empty(), "--out '", o.checkpoint.out_dir,
        "' already holds checkpoints (newest: ", existing.empty() ? "" : existing.back().second,
        "); pass --resume auto to continue that run, or choose another --out");
  } else {
    for (const auto& [s, dir] : existing)
      MOET_CHECK(s <= resume_step_, "--out '", o.checkpoint.out_dir, "' holds ", dir,
                 ", a checkpoint after step ", resume_step_,
                 " that this run would overwrite; resume from it or choose another --out");
  }
  keep_run_tokenizer(o.checkpoint.out_dir, o.data.tokenizer,
                     false);  // refuses another tokenizer, writes nothing
  const LrSchedule schedule = train_lr_schedule(o);
  // Every option as run.json has them (`moet eval --checkpoint` reads the data, split and batch
  // from there), and what the run resolved from them: the recipe (note()), the ranks, the
  // learning-rate schedule.
  run_ = {{"options", to_json(o)},
          {"precision", o.precision.name()},
          {"ranks", world ? world->size() : 1},
          {"lr",
           {{"schedule", schedule_name(o.optim.schedule)},
            {"max", o.optim.lr},
            {"min", schedule.min_lr},
            {"warmup", schedule.warmup},
            {"total_steps", o.optim.steps}}},
          {"rng", "counter-based Philox4x32-10 keyed by the seed (no generator state)"},
          {"command_line", o.command_line}};
}

void TrainCheckpoints::open() {
  const TrainOptions& o = o_;
  if (o.checkpoint.out_dir.empty()) return;
  const int rank = world_ ? world_->rank() : 0, ranks = world_ ? world_->size() : 1;
  if (rank == 0) {
    fs::create_directories(o.checkpoint.out_dir);
    CheckpointSaver::remove_partial_saves(o.checkpoint.out_dir);
  }
  if (world_) world_->barrier();  // nobody writes into a directory rank 0 is cleaning
  keep_run_tokenizer(o.checkpoint.out_dir, o.data.tokenizer, rank == 0);
  CheckpointSaver::Options so;
  so.run_dir = o.checkpoint.out_dir;
  so.config_json_path = o.model_path;
  so.rank = rank;
  so.ranks = ranks;
  so.keep_last = o.checkpoint.keep_last;
  so.async = !o.checkpoint.sync_save;
  saver_ = std::make_unique<CheckpointSaver>(so);
}

TrainCheckpoints::~TrainCheckpoints() = default;

namespace {
// What a resume converts: the checkpoint's moments stored in a dtype other than the run's (the
// loader widens bf16 exactly or rounds fp32 to nearest even, as Transformer Engine's FusedAdam
// load_state_dict casts to its exp_avg_dtype); "" when they match.
std::string moments_conversion_note(const CheckpointIndex& ix, const OptimizerOptions& o) {
  std::string note;
  const std::pair<const char*, bool> want[] = {
      {"adam_m/", o.exp_avg_dtype == MomentDtype::kBf16},
      {"adam_v/", o.exp_avg_sq_dtype == MomentDtype::kBf16}};
  for (const auto& [prefix, bf16] : want) {
    const auto it = ix.tensors.lower_bound(prefix);
    if (it == ix.tensors.end() || it->first.rfind(prefix, 0) != 0 || it->second.bf16 == bf16)
      continue;
    const bool first = std::string(prefix) == "adam_m/";
    note += str(note.empty() ? "" : "; ", first ? "--exp-avg-dtype " : "--exp-avg-sq-dtype ",
                bf16 ? "bf16" : "fp32", ": the checkpoint's ", first ? "first" : "second",
                " moments (", bf16 ? "fp32" : "bf16", ") ",
                bf16 ? "rounded to bf16 (nearest even)" : "widened to fp32 (exact)");
  }
  return note.empty() ? note : "AdamW moments converted on resume: " + note;
}
}  // namespace

int64_t TrainCheckpoints::restore(const StateHolder& h, AdamW& adamw, const DataShape& data) {
  MOET_ASSERT(!resume_dir_.empty());
  CheckpointReader reader(resume_dir_);
  const CheckpointIndex& ix = reader.index();
  reader.check_model(model_config_);
  MOET_CHECK(ix.seed == data.seed, o_.data.data_seed ? "--data-seed " : "--seed ", data.seed,
             " differs from the checkpoint's data seed ", ix.seed, " (", resume_dir_,
             "): the data order follows it");
  const std::optional<TrainOptions> then =
      checkpoint_run_options(ix.run, resume_dir_ + "/checkpoint.json run");
  const int64_t seq = then ? then->data.seq : -1, accum = then ? then->data.grad_accum : -1;
  MOET_CHECK(seq == data.seq, "--seq ", data.seq, " differs from the checkpoint's ", seq, " (",
             resume_dir_, ")");
  MOET_CHECK(ix.global_batch == data.global_batch && accum == data.grad_accum,
             "the global batch (ranks x micro-batch = ", data.global_batch / data.grad_accum,
             " sequences x ", data.grad_accum, " micro-batches) differs from the checkpoint's (",
             accum > 0 ? ix.global_batch / accum : 0, " x ", accum, ", ", resume_dir_,
             "); a resumed run keeps it so that no sample is repeated or skipped");
  schedule_note_ =
      resumed_schedule_change(ix.run, train_lr_schedule(o_), schedule_name(o_.optim.schedule),
                              o_.optim.override_opt_param_scheduler, ix.step, resume_dir_);
  if (then) {
    auto split_of = [](const std::string& s) { return s.empty() ? std::string("95,5") : s; };
    const std::string was = then->data.spec, was_split = split_of(then->data.split);
    if (was != o_.data.spec || was_split != split_of(o_.data.split)) {
      data_changed_from_ = DataOrigin{was, was_split};
      data_note_ =
          str("the data change at step ", ix.step, ": --data '", was, "' --split ", was_split,
              " -> --data '", o_.data.spec, "' --split ", split_of(o_.data.split),
              " (training reads the new data's samples from here; the held-out loss is "
              "measured on its held-out documents)");
    }
  }
  const std::vector<StatePiece> pieces = training_state_pieces(h, false);
  reader.check_tensors(pieces, "param/", !h.pipeline_stage);
  bool has_moments = false;
  for (const auto& [name, t] : ix.tensors) has_moments |= name.rfind("adam_m/", 0) == 0;
  MOET_CHECK(has_moments, "checkpoint ", resume_dir_,
             " holds weights only (no optimizer state): start a run from it with --init-from");
  moments_note_ = moments_conversion_note(ix, o_.optim);
  reader.read(pieces);
  h.params->mark_updated();
  adamw.set_steps_taken(ix.adam_steps);
  return ix.step;
}

int64_t TrainCheckpoints::prepare(const StateHolder& h) {
  if (!saver_) return 0;
  const std::vector<StatePiece> pieces = training_state_pieces(h, true);
  saver_->reserve(pieces);
  int64_t bytes = 0;
  for (const StatePiece& p : pieces) bytes += int64_t(p.bytes());
  return bytes;
}

bool TrainCheckpoints::due(int64_t steps_done, bool last_step) const {
  return saver_ && (last_step ||
                    (o_.checkpoint.save_every > 0 && steps_done % o_.checkpoint.save_every == 0));
}

double TrainCheckpoints::save(int64_t steps_done, const StateHolder& h, const AdamW& adamw,
                              const DataShape& data) {
  MOET_ASSERT(saver_ != nullptr);
  CheckpointIndex meta;
  meta.step = steps_done;
  meta.consumed_samples = steps_done * data.global_batch;
  meta.tokens = meta.consumed_samples * data.seq;
  meta.seed = data.seed;
  meta.data_cursor = steps_done;
  meta.global_batch = data.global_batch;
  meta.adam_steps = adamw.steps_taken();
  meta.run = run_;
  meta.model_config = model_config_;
  saver_->save(training_state_pieces(h, true), meta);
  return saver_->stall_seconds();
}

std::string TrainCheckpoints::finish() {
  if (!saver_) return "";
  saver_->wait();
  return saver_->last_published();
}

std::string TrainCheckpoints::newest() const {
  if (o_.checkpoint.out_dir.empty()) return "";
  const auto all = list_checkpoints(o_.checkpoint.out_dir);
  return all.empty() ? "" : all.back().second;
}

}  // namespace moet

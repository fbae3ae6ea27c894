#include "cli/eval_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "cli/checkpoint_run.h"
#include "cli/flag_validators.h"
#include "cli/text_format_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/flag_check.h"
#include "data/gpt_dataset.h"
#include "data/open_dataset.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "measure/recipe_choice.h"
#include "model/model.h"
#include "train/checkpointing.h"
#include "train/evaluation.h"

namespace moet::cli {

namespace {
std::string fmt_fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
}  // namespace

namespace {
// --precision's words: auto and each recipe's name.
std::vector<std::string> precision_names() {
  std::vector<std::string> v;
  for (const auto& [name, recipe] : precision_choices()) v.push_back(name);
  return v;
}
}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  CLI::App* c =
      app.add_subcommand("eval", "held-out loss, perplexity and bits per byte of a checkpoint");
  a.app = c;
  c->add_option("--checkpoint", a.checkpoint, "a run directory or a step directory")->required();
  c->add_option("--data", a.data,
                "text file or directory, Megatron PREFIX or blend \"W1 PREFIX1 W2 PREFIX2\", or "
                "'mock', as for moet train (default: the run's data, as the checkpoint records "
                "them)");
  c->add_option(
      "--tokenizer", a.tokenizer,
      "tokenizer of text data and of bits per byte: 'byte' or a Hugging Face tokenizer.json "
      "(default: a tokenizer.json in the checkpoint's step directory, else the one moet train "
      "kept in the run directory, else the one recorded beside Megatron data, else 'byte'; "
      "refused when it does not fit the model's vocabulary)");
  c->add_option("--split", a.split,
                "train,validation shares of the documents; the held-out part is evaluated "
                "(default: the run's, else 95,5; 0,100 holds out every document)");
  add_text_format_options(c, a.doc_boundary, a.json_key);
  c->add_option("--batches", a.batches_text,
                "held-out batches to evaluate, or 'all' (the whole held-out part: with --split "
                "0,100 a whole held-out file or dataset; default: the run's --eval-batches, else "
                "4)");
  c->add_option("--micro-batch", a.micro_batch, "sequences per batch (default: the run's, else 8)");
  c->add_option("--seq", a.seq,
                "sequence length (default: the run's, else min(256, max_position_embeddings))");
  c->add_option("--precision", a.precision,
                "the recipe of the forward: auto, fp32, bf16, mxfp8, fp8-blockwise, nvfp4, mxfp4 "
                "(default: the run's, else fp32)")
      ->check(CLI::IsMember(precision_names()));
  c->add_option(
      "--bf16-layers", a.bf16_layers,
      "FP8 and FP4 recipes: the first and last layers in bf16 (default: the run's, else 1)");
  c->add_option("--bf16-layers-end", a.bf16_layers_end,
                "FP8 and FP4 recipes: the last layers in bf16 (default: the run's, else as "
                "--bf16-layers)");
  c->add_option("--seed", a.seed, "seed of the data (mock data; default: the run's)")
      ->check(unsigned_integer());
  c->add_option("--threads", a.threads, "threads (default: all cores)");
  c->add_flag("--overwrite", a.overwrite, "replace an existing --dump file");
  c->add_option("--dump", a.dump,
                "write input_ids (int64 [S, T]) and logits (fp32 [S, T, V]) of the evaluated "
                "sequences to this safetensors file");
  c->add_flag("--json", a.json, "print the result as one JSON line (full precision)");
  return c;
}

namespace {

// The flags as given, checked before the checkpoint is read; --batches N or all.
EvalArgs checked_args(const EvalArgs& given) {
  EvalArgs a = given;
  if (!given.batches_text.empty()) {
    if (given.batches_text == "all") {
      a.batches = kAllBatches;
    } else {
      char* end = nullptr;
      const long long n = std::strtoll(given.batches_text.c_str(), &end, 10);
      MOET_CHECK(*end == '\0' && n > 0, "--batches '", given.batches_text,
                 "' is neither a positive number nor 'all'");
      a.batches = n;
    }
  }
  check_flag_positive("--micro-batch", given.micro_batch);
  check_flag_at_least("--bf16-layers", given.bf16_layers, 0);
  if (given.bf16_layers_end) check_flag_at_least("--bf16-layers-end", *given.bf16_layers_end, 0);
  if (given.seq) check_flag_positive("--seq", *given.seq);
  check_flag_threads(given.threads);
  if (!given.split.empty()) parse_data_split(given.split);
  MOET_CHECK(given.dump.empty() || given.overwrite || !std::filesystem::exists(given.dump),
             "--dump file '", given.dump,
             "' already exists; refusing to overwrite it (--overwrite replaces it)");
  return a;
}

// Each flag not given takes the run's setting; returns what came from the run ("--data mock").
std::vector<std::string> take_run_settings(EvalArgs& a, const RunSettings& rs) {
  auto set = [&](const char* flag) { return a.app && a.app->count(flag) > 0; };
  std::vector<std::string> from_run;
  auto take = [&](const char* flag, auto& v, const auto& run_value, const std::string& shown) {
    if (set(flag)) return;
    v = run_value;
    from_run.push_back(std::string(flag) + " " + (shown.empty() ? "''" : shown));
  };
  if (rs.options) {
    const DataOptions& d = rs.options->data;
    const std::string split = d.split.empty() ? "95,5" : d.split;
    take("--data", a.data, d.spec, d.spec);
    take("--split", a.split, split, split);
    take("--doc-boundary", a.doc_boundary, d.doc_boundary, doc_boundary_name(d.doc_boundary));
    take("--json-key", a.json_key, d.json_key, d.json_key);
    if (!rs.precision.empty()) take("--precision", a.precision, rs.precision, rs.precision);
    const int64_t bf16 = rs.options->precision.bf16_layers;
    take("--bf16-layers", a.bf16_layers, bf16, std::to_string(bf16));
    if (const std::optional<int64_t> end = rs.options->precision.bf16_layers_end; end)
      take("--bf16-layers-end", a.bf16_layers_end, end, std::to_string(*end));
    take("--micro-batch", a.micro_batch, d.micro_batch, std::to_string(d.micro_batch));
    const int64_t batches = rs.options->logging.eval_batches;
    take("--batches", a.batches, batches, std::to_string(batches));
    take("--seq", a.seq, std::optional<int64_t>(d.seq), std::to_string(d.seq));
  }
  if (!set("--seed") && rs.seed != 0) a.seed = rs.seed;
  if (a.precision.empty()) a.precision = "fp32";
  return from_run;
}

// A progress line on stderr: redrawn on a terminal, every tenth of the way elsewhere.
std::function<void(int64_t, int64_t, double)> progress_line(bool quiet) {
  const bool tty = isatty(fileno(stderr));
  auto shown = std::make_shared<int64_t>(0);
  return [=](int64_t done, int64_t total, double mean) {
    if (quiet || total < 2) return;
    if (!tty && done != total && done * 10 / total == *shown * 10 / total) return;
    *shown = done;
    std::fprintf(stderr, "%smoet eval: %lld/%lld batches, loss %.4f%s", tty ? "\r" : "",
                 (long long)done, (long long)total, mean, tty && done < total ? "" : "\n");
    std::fflush(stderr);
  };
}

void print_result(const EvalArgs& a, const std::string& step, const EvalResult& r, int64_t T,
                  Recipe recipe, const std::string& data) {
  if (a.json) {
    const nlohmann::ordered_json j = {
        {"checkpoint", step},
        {"loss", r.loss},
        {"loss_se", std::isfinite(r.loss_se) ? nlohmann::ordered_json(r.loss_se)
                                             : nlohmann::ordered_json(nullptr)},
        {"perplexity", r.perplexity},
        {"bits_per_byte", r.bits_per_byte},
        {"batches", r.batches},
        {"micro_batch", a.micro_batch},
        {"seq", T},
        {"precision", recipe_name(recipe)},
        {"data", data}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const std::string fewer = r.batches < a.batches && a.batches != kAllBatches
                                ? str(" (", a.batches, " asked: the held-out part holds only ",
                                      r.batches, " batches of ", a.micro_batch, " x ", T, ")")
                                : "";
  const std::string se =
      std::isfinite(r.loss_se) ? str(" ± ", fmt_fixed(r.loss_se, 6), " (standard error)") : "";
  std::printf(
      "moet eval: %s: loss %.6f%s, perplexity %.4f, bits/byte %.6f (%lld held-out batches of "
      "%lld x %lld tokens%s, %s; %s)\n",
      step.c_str(), r.loss, se.c_str(), r.perplexity, r.bits_per_byte, (long long)r.batches,
      (long long)a.micro_batch, (long long)T, fewer.c_str(), recipe_name(recipe), data.c_str());
}

}  // namespace

void run_eval(const EvalArgs& given) {
  EvalArgs a = checked_args(given);
  const std::string step = resolve_checkpoint_dir(a.checkpoint);
  const RunSettings rs = run_settings(step);
  const std::vector<std::string> from_run = take_run_settings(a, rs);
  if (!a.split.empty()) parse_data_split(a.split);
  if (a.threads > 0) ops::set_num_threads(a.threads);
  const ModelConfig cfg = load_model_config(step + "/config.json");
  const int64_t T = a.seq.value_or(std::min<int64_t>(256, cfg.max_position_embeddings));
  const auto tokenizer =
      checkpoint_tokenizer(a.tokenizer, step, a.data, cfg.vocab_size, "moet eval").tokenizer;
  const auto ds = open_token_dataset(a.data, *tokenizer, cfg.vocab_size, a.seed, a.split,
                                     TextFormat{a.doc_boundary, a.json_key});
  // the recipe (auto: the faster here) and its GEMMs: the run's, else the faster here
  const RecipeChoice recipe = choose_recipe(
      {a.precision == "auto" ? std::nullopt : std::optional<Recipe>(parse_recipe(a.precision)),
       a.bf16_layers, a.bf16_layers_end.value_or(a.bf16_layers),
       model_gemm_shapes(cfg, a.micro_batch * T), "", rs.gemm_operands, true});
  ops::set_gemm_operand_dtype(recipe.operands, recipe.operands_why);
  if (!from_run.empty() && !a.json) {
    std::string s;
    for (const std::string& f : from_run) s += (s.empty() ? "" : ", ") + f;
    std::printf("moet eval: as the run evaluated (%s/checkpoint.json): %s\n", step.c_str(),
                s.c_str());
  }
  Model model(cfg, {.micro_batch = a.micro_batch, .seq_len = T, .precision = recipe.policy});
  load_checkpoint_weights(step, model.params());
  EvalDump dump;
  const EvalResult r = evaluate_held_out(model, *ds, a.batches, a.dump.empty() ? nullptr : &dump,
                                         tokenizer.get(), progress_line(a.json));
  if (!a.dump.empty()) {
    const int64_t S = r.batches * a.micro_batch;
    SafetensorsWriter w;
    w.add("input_ids", StDType::I64, {S, T}, dump.input_ids.data());
    w.add("logits", StDType::F32, {S, T, cfg.vocab_size}, dump.logits.data());
    w.write(a.dump);
  }
  print_result(a, step, r, T, recipe.policy.recipe, ds->describe());
}

}  // namespace moet::cli

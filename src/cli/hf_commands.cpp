#include "cli/hf_commands.h"

#include <cstdio>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf.h"
#include "cli/checkpoint_run.h"
#include "cli/flag_validators.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/flag_check.h"
#include "data/tokenizer_export.h"
#include "model/model.h"

namespace moet::cli {

namespace {

double gigabytes(int64_t bytes) { return double(bytes) / 1e9; }

}  // namespace

CLI::App* add_export_hf_command(CLI::App& app, ExportHfArgs& a) {
  CLI::App* c = app.add_subcommand(
      "export-hf",
      "write a checkpoint's weights as a Hugging Face DeepseekV3ForCausalLM directory");
  c->add_option("CKPT", a.checkpoint, "a run directory (its latest checkpoint) or a step directory")
      ->required();
  c->add_option("OUT_DIR", a.out_dir, "the Hugging Face directory to write")->required();
  c->add_flag("--overwrite", a.overwrite, "replace the files of an existing non-empty OUT_DIR");
  c->add_option("--dtype", a.dtype, "weight storage type: bf16 or fp32 (the router stays fp32)")
      ->check(CLI::IsMember({"bf16", "fp32"}))
      ->capture_default_str();
  c->add_option("--max-shard-bytes", a.max_shard_bytes,
                "shard the weights into files of at most this many bytes")
      ->capture_default_str();
  c->add_option(
      "--tokenizer", a.tokenizer,
      "the tokenizer written beside the weights: 'byte' or a tokenizer.json (default: "
      "the run's tokenizer.json, else the one recorded beside the run's Megatron data, else "
      "'byte'; refused when it does not fit the model's vocabulary)");
  c->add_flag("--no-mtp", a.no_mtp,
              "leave the MTP modules out: transformers' DeepseekV3ForCausalLM does not use them "
              "and lists their weights as unexpected keys");
  return c;
}

CLI::App* add_import_hf_command(CLI::App& app, ImportHfArgs& a) {
  CLI::App* c = app.add_subcommand(
      "import-hf", "write a Hugging Face DeepseekV3ForCausalLM directory as a moet checkpoint");
  c->add_option("HF_DIR", a.hf_dir, "config.json and model.safetensors (or shards with an index)")
      ->required();
  c->add_option("OUT_CKPT", a.out_checkpoint,
                "the weights-only checkpoint directory to create (train from it with --init-from)")
      ->required();
  c->add_option("--seed", a.seed,
                "initialises the MTP modules the directory has no weights for (transformers "
                "saves none)")
      ->check(unsigned_integer())
      ->capture_default_str();
  return c;
}

void run_export_hf(const ExportHfArgs& a) {
  check_flag_positive("--max-shard-bytes", a.max_shard_bytes);
  MOET_CHECK(a.overwrite || !std::filesystem::exists(a.out_dir) ||
                 (std::filesystem::is_directory(a.out_dir) && std::filesystem::is_empty(a.out_dir)),
             "'", a.out_dir,
             "' exists and is not empty; refusing to overwrite it (--overwrite "
             "replaces its model files)");
  const std::string step = resolve_checkpoint_dir(a.checkpoint);
  const std::string config_path = step + "/config.json";
  const ModelConfig cfg = load_model_config(config_path);
  // the tokenizer, refused before anything is written when it is not the model's
  const std::string tok_spec =
      checkpoint_tokenizer(a.tokenizer, step, "", cfg.vocab_size, "moet export-hf").spec;
  Model model(cfg, {.micro_batch = 1, .seq_len = 1});
  load_checkpoint_weights(step, model.params());
  HfExportOptions opts;
  opts.dtype = parse_hf_dtype(a.dtype);
  opts.max_shard_bytes = a.max_shard_bytes;
  opts.mtp = !a.no_mtp;
  // the run's tokenizer beside the weights, and its end of document as bos/eos of the config
  std::filesystem::create_directories(a.out_dir);
  const ExportedTokenizer tok =
      export_hf_tokenizer(tok_spec, a.out_dir, cfg.max_position_embeddings);
  opts.bos_token_id = opts.eos_token_id = tok.eos_id;
  const HfExportResult r =
      export_hf(model.params(), cfg, read_text_file(config_path), a.out_dir, opts);
  std::printf("moet export-hf: %s -> %s: %lld tensors, %.3f GB (%s) in %zu file(s)\n", step.c_str(),
              a.out_dir.c_str(), (long long)r.tensors, gigabytes(r.bytes), a.dtype.c_str(),
              r.files.size());
  std::printf(
      "moet export-hf: tokenizer.json and tokenizer_config.json from %s; bos and eos %s "
      "(id %d)\n",
      tok.description.c_str(), tok.eos_token.c_str(), tok.eos_id);
  if (opts.mtp && cfg.num_nextn_predict_layers > 0)
    std::printf(
        "moet export-hf: the %lld MTP module(s) are written as model.layers.%lld.* (DeepSeek's "
        "layout); transformers' DeepseekV3ForCausalLM does not use them and lists them as "
        "unexpected keys when it loads (--no-mtp leaves them out)\n",
        (long long)cfg.num_nextn_predict_layers, (long long)cfg.num_hidden_layers);
}

void run_import_hf(const ImportHfArgs& a) {
  MOET_CHECK(!std::filesystem::exists(a.out_checkpoint), "OUT_CKPT '", a.out_checkpoint,
             "' already exists; import-hf never replaces a checkpoint (remove it or choose "
             "another OUT_CKPT)");
  const ModelConfig cfg = load_hf_config(a.hf_dir);
  Model model(cfg, {.micro_batch = 1, .seq_len = 1});
  model.init_parameters(a.seed);
  const HfLoadResult r = load_hf_weights(a.hf_dir, cfg, model.params());
  for (int64_t k : r.mtp_missing)
    std::printf(
        "moet import-hf: %s has no weights for MTP module %lld: initialised (--seed %llu)\n",
        a.hf_dir.c_str(), (long long)k, (unsigned long long)a.seed);
  save_weights_checkpoint(a.out_checkpoint, model.params(), a.hf_dir + "/config.json");
  std::printf("moet import-hf: %s -> %s: %lld tensors from %lld file(s)\n", a.hf_dir.c_str(),
              a.out_checkpoint.c_str(), (long long)r.tensors, (long long)r.files);
}

}  // namespace moet::cli

#include "cli/checkpoint_run.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/file_io.h"
#include "data/dataset_tokenizer.h"
#include "data/tokenizer.h"
#include "train/checkpointing.h"

namespace moet::cli {

RunSettings run_settings(const std::string& step) {
  RunSettings r;
  const std::string path = step + "/checkpoint.json";
  if (!std::filesystem::exists(path)) return r;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(path), nullptr, false);
  if (!j.is_object()) return r;
  if (j.contains("run")) {
    r.options = checkpoint_run_options(j["run"], path + " run");
    if (j["run"].contains("precision") && j["run"]["precision"].is_string())
      r.precision = j["run"]["precision"].get<std::string>();
    if (j["run"].contains("gemm_operands") && j["run"]["gemm_operands"].is_string())
      r.gemm_operands = j["run"]["gemm_operands"].get<std::string>();
  }
  if (j.contains("seed") && j["seed"].is_number_unsigned()) r.seed = j["seed"].get<uint64_t>();
  return r;
}

CheckpointTokenizer checkpoint_tokenizer(const std::string& flag, const std::string& step_dir,
                                         const std::string& data, int64_t model_vocab,
                                         const char* command) {
  std::string data_spec = data;
  if (data_spec.empty()) {
    const RunSettings rs = run_settings(step_dir);
    if (rs.options) data_spec = rs.options->data.spec;
  }
  CheckpointTokenizer t;
  t.spec =
      resolve_data_tokenizer(run_tokenizer_spec(flag, step_dir, ""), data_spec, "byte", command);
  t.tokenizer = load_tokenizer(t.spec);
  const std::string whose =
      flag.empty() ? std::string("the tokenizer of ") + step_dir : "--tokenizer " + flag;
  check_tokenizer_fits_model(*t.tokenizer, model_vocab, whose);
  return t;
}

}  // namespace moet::cli

// Hugging Face checkpoints of DeepSeek-V3 models (docs/huggingface.md): export a moet model as
// a directory that transformers' DeepseekV3ForCausalLM loads (config.json and safetensors,
// sharded past a size limit), and load such a directory's weights into a moet model. Tensor
// names are the hub's (deepseek-ai/DeepSeek-V3's model.safetensors.index.json); MTP modules are
// written the way DeepSeek publishes them, as layers num_hidden_layers + k - 1 with their own
// copies of the embedding and the output head.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace moet {

class ParamStore;

enum class HfDType { F32, BF16 };

// "bf16" | "fp32" (CLI spelling); throws moet::Error otherwise.
HfDType parse_hf_dtype(const std::string& name);

struct HfExportOptions {
  // Storage type of the weights. The router (mlp.gate.weight, e_score_correction_bias) stays
  // F32 in either, as transformers keeps it (`_keep_in_fp32_modules_strict`).
  HfDType dtype = HfDType::BF16;
  // Past this many bytes of tensor data the weights go to model-0000i-of-0000n.safetensors
  // shards plus model.safetensors.index.json (transformers' default max_shard_size, "5GB").
  int64_t max_shard_bytes = 5'000'000'000;
  // The MTP modules (as layers num_hidden_layers + k - 1, DeepSeek's layout). transformers'
  // DeepseekV3ForCausalLM has none and lists their weights as unexpected keys; false leaves them
  // out (and writes num_nextn_predict_layers 0).
  bool mtp = true;
  // The tokenizer's special tokens, into config.json's bos_token_id / eos_token_id (< 0: the
  // source config's are kept).
  int32_t bos_token_id = -1, eos_token_id = -1;
};

struct HfExportResult {
  std::vector<std::string> files;  // the weight files written (names inside out_dir)
  int64_t tensors = 0;
  int64_t bytes = 0;  // tensor data, all files
};

// The config.json transformers needs for `c`: source_json's fields (token ids and other
// fields moet does not interpret are kept) with every model field rewritten from `c`, plus
// architectures, model_type, torch_dtype and rope_interleave. Throws moet::Error naming
// source_name when source_json is not a JSON object.
std::string hf_config_json(const ModelConfig& c, const std::string& source_json,
                           const std::string& source_name, HfDType dtype);

// Writes out_dir (created if missing): config.json, and model.safetensors or the shards and
// their index; each file is written atomically, weight files left by an earlier export that this
// one does not rewrite are removed. The store must hold the whole model (every expert): under
// expert parallelism gather first. source_json: the model's config.json text.
HfExportResult export_hf(const ParamStore& ps, const ModelConfig& c, const std::string& source_json,
                         const std::string& out_dir, const HfExportOptions& opts = {});

// The model config of a Hugging Face directory (dir/config.json, moet's reader), with the checks
// transformers' layout needs (rope_interleave must not be false).
ModelConfig load_hf_config(const std::string& dir);

// Throws moet::Error with one line naming the first field where the directory's config differs
// from the model's (MTP depth excepted: see load_hf_weights).
void check_hf_config_matches(const ModelConfig& hf, const ModelConfig& model,
                             const std::string& hf_source);

struct HfLoadResult {
  int64_t tensors = 0;  // tensors read into the store
  int64_t files = 0;    // weight files opened
  // MTP depths k (1-based) the directory has no weights for: their parameters were left as they
  // were (transformers' DeepseekV3ForCausalLM has no MTP modules and saves none).
  std::vector<int64_t> mtp_missing;
};

// Reads a Hugging Face directory (model.safetensors, or shards listed by
// model.safetensors.index.json) into every parameter name of ps, converting BF16/F16/F32 to
// fp32, and calls ps.mark_updated(). Only the names the store has are read (an expert-parallel
// store reads its own experts). First checks dir's config against `model`. An MTP module is
// loaded whole or, when the directory has none of its own weights, not at all (mtp_missing).
// The MTP modules' copies of the embedding and head, and lm_head.weight of a tied model, must
// equal the tensors moet shares for them. Any missing tensor, wrong shape, or tensor a model of
// this config would not have throws moet::Error with one line naming the file and tensor.
HfLoadResult load_hf_weights(const std::string& dir, const ModelConfig& model, ParamStore& ps);

// Whether dir looks like a Hugging Face model directory: config.json and model.safetensors or
// model.safetensors.index.json (and no moet checkpoint.json).
bool is_hf_directory(const std::string& dir);

}  // namespace moet

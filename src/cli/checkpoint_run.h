// What a checkpoint says about the run that wrote it, for the commands that read checkpoints
// (eval, generate, export-hf): the run's options, its resolved recipe and seed, and the
// tokenizer its token ids mean.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "train/train_options.h"

namespace moet::cli {

// The run's settings a checkpoint records (checkpoint.json's "run"), for the flags not given.
struct RunSettings {
  std::optional<TrainOptions> options;  // none when the checkpoint records none (an imported one)
  std::string precision;                // the recipe the run resolved
  std::string gemm_operands;            // "bf16", "fp32": where its low-precision GEMMs ran
  uint64_t seed = 0;
};
RunSettings run_settings(const std::string& step_dir);

// The tokenizer of a checkpoint's token ids, chosen in this order: `flag` (--tokenizer), the
// tokenizer.json moet train kept beside the step or in its run directory, the one recorded
// beside `data` (Megatron data; "" = the run's --data), else bytes — refused in one line
// (naming `command`) when it is not the data's own or does not fit the model's vocabulary.
struct CheckpointTokenizer {
  std::string spec;  // "byte" or a tokenizer.json path
  std::unique_ptr<Tokenizer> tokenizer;
};
CheckpointTokenizer checkpoint_tokenizer(const std::string& flag, const std::string& step_dir,
                                         const std::string& data, int64_t model_vocab,
                                         const char* command);

}  // namespace moet::cli

// `moet train --config FILE.yaml|json`: a file holding any of train's flags (the Megatron/NeMo
// habit of a run config), read as if its flags came first on the command line, so flags given
// there override it. Keys are flag names without the dashes ("micro-batch" or "micro_batch");
// values are scalars, lists (a flag taking several values) or booleans (true gives the flag,
// false leaves it out). YAML: one "key: value" per line, "# comments", inline "[a, b]" or
// block "- item" lists; nested mappings are refused (they would not be flags).
#pragma once
#include <string>
#include <vector>

namespace moet::cli {

// The flags a config file holds, in its order: {"--micro-batch", "4", "--deterministic", ...}.
// Throws one moet::Error line naming the file and line for anything it cannot read.
std::vector<std::string> flags_from_config_file(const std::string& path);

// argv with a train command's `--config FILE` (or --config=FILE) replaced by the file's flags
// placed right after "train" (the command line's own flags, after them, win); argv unchanged
// for other commands. `config_path` gets FILE ("" when none).
std::vector<std::string> expand_config_file(const std::vector<std::string>& argv,
                                            std::string* config_path);

}  // namespace moet::cli

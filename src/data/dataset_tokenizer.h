// The tokenizer a Megatron dataset was prepared with, kept beside its PREFIX.bin/.idx by
// `moet data prepare` (PREFIX.moet.json names it; a tokenizer.json is copied to
// PREFIX.tokenizer.json), so that train, eval, generate and export-hf find the dataset's own
// tokenizer or refuse one that does not belong to it (docs/data.md, "The dataset's tokenizer").
// And the one rule every command applies before it encodes, decodes or counts bytes: a
// tokenizer must fit the model's vocabulary.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moet {

class Tokenizer;

// Writes PREFIX.moet.json (and PREFIX.tokenizer.json for a tokenizer.json), replacing older ones
// of the prefix. `spec`: "byte" (or "") or the path of the tokenizer.json the data were encoded
// with.
void record_dataset_tokenizer(const std::string& prefix, const std::string& spec,
                              const Tokenizer& tokenizer);

// The tokenizer PREFIX was prepared with: "byte" or the path of PREFIX.tokenizer.json; nullopt
// when the prefix has no record (a dataset another tool wrote, or one prepared before moet kept
// records). Throws one moet::Error line for a record that is unreadable or names a missing file.
std::optional<std::string> dataset_tokenizer(const std::string& prefix);

// Whether two tokenizer specs ("byte"/"" or tokenizer.json paths) are the same tokenizer: both
// bytes, or files with equal contents.
bool same_tokenizer(const std::string& a, const std::string& b);

// What the datasets of a --data argument were tokenized with.
struct DataTokenizer {
  std::optional<std::string> spec;      // the datasets' tokenizer (all agree), if any is known
  std::vector<std::string> unrecorded;  // prefixes without a record
  bool indexed = false;                 // --data names Megatron datasets (not text or mock)
};
// Throws one moet::Error line when a blend's datasets were tokenized differently.
DataTokenizer data_tokenizer(const std::string& data_spec);

// The tokenizer `command` uses for `data_spec`: `flag` when given ("" = not given), which must
// be the datasets' own where they have a record; else the datasets' record; else `fallback`.
std::string resolve_data_tokenizer(const std::string& flag, const std::string& data_spec,
                                   const std::string& fallback, const char* command);

// The warning for Megatron data without a record when no tokenizer was given ("" when none is
// due): their ids cannot be read as text, and the run keeps no tokenizer.
std::string unrecorded_tokenizer_warning(const std::string& data_spec);

// Refuses (one moet::Error line, naming `whose` and how to fix it) a tokenizer whose ids do not
// fit the model's vocab_size, or that leaves far more of the model's ids unused than a padded
// vocabulary does (a model pads its tokenizer's ids by up to 1/8 plus 128, as GPT-2's 50,304 pad
// 50,257 and Qwen2's 151,936 pad 151,665): a byte tokenizer meeting a 4,096-id model is the
// wrong tokenizer, not a small one.
void check_tokenizer_fits_model(const Tokenizer& tokenizer, int64_t model_vocab,
                                const std::string& whose);

}  // namespace moet

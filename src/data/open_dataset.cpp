#include "data/open_dataset.h"

#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace moet {

namespace {

// The prefix PREFIX, PREFIX.idx or PREFIX.bin names; "" when `spec` names none.
std::string single_prefix(const std::string& spec) {
  auto ends_with = [&](std::string_view suffix) {
    return spec.size() > suffix.size() &&
           spec.compare(spec.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (is_indexed_prefix(spec)) return spec;
  if ((ends_with(".idx") || ends_with(".bin")) &&
      is_indexed_prefix(spec.substr(0, spec.size() - 4)))
    return spec.substr(0, spec.size() - 4);
  return "";
}

}  // namespace

std::vector<std::string> indexed_prefixes(const std::string& spec) {
  if (spec.empty() || spec == "mock") return {};
  const std::string prefix = single_prefix(spec);
  if (!prefix.empty()) return {prefix};
  std::error_code ec;
  if (std::filesystem::exists(spec, ec) || spec.find_first_of(" \t\n") == std::string::npos)
    return {};
  return parse_data_blend(spec).first;
}

std::unique_ptr<TokenDataset> open_token_dataset(const std::string& spec,
                                                 const Tokenizer& tokenizer, int64_t vocab_size,
                                                 uint64_t seed, const std::string& split_text,
                                                 const TextFormat& format) {
  const DataSplit split = parse_data_split(split_text.empty() ? "95,5" : split_text);
  std::unique_ptr<TokenDataset> ds;
  std::error_code ec;
  const std::string prefix = spec == "mock" ? "" : single_prefix(spec);
  if (spec == "mock") {
    ds = std::make_unique<MockDataset>(vocab_size, seed);
  } else if (!prefix.empty()) {
    ds = std::make_unique<GptDataset>(prefix, vocab_size, seed, split);
  } else if (spec.empty() || std::filesystem::exists(spec, ec)) {
    std::vector<std::string> files;
    if (spec.empty())
      files = list_corpus_files(default_corpus_path());
    else if (std::filesystem::is_directory(spec, ec))
      files = list_corpus_files(spec);
    else
      files = {spec};
    // before the text is read and tokenized
    MOET_CHECK(tokenizer.vocab_size() <= vocab_size, "the tokenizer (", tokenizer.describe(),
               ") has ", tokenizer.vocab_size(), " ids but the model's vocab_size is ", vocab_size);
    const double held_out = split.valid / (split.train + split.valid + split.test);
    ds = std::make_unique<TextDataset>(files, seed, held_out, &tokenizer, format);
  } else {
    auto [prefixes, weights] = parse_data_blend(spec);
    MOET_CHECK(spec.find_first_of(" \t\n") != std::string::npos, "--data '", spec,
               "' is no text file or directory, and no Megatron prefix ('", spec,
               ".idx' does not exist)");
    std::vector<std::unique_ptr<GptDataset>> parts;
    for (const std::string& p : prefixes) {
      MOET_CHECK(is_indexed_prefix(p), "--data: '", p,
                 ".idx' does not exist (a blend's datasets are Megatron prefixes, e.g. written by "
                 "moet data prepare)");
      parts.push_back(std::make_unique<GptDataset>(p, vocab_size, seed, split));
    }
    if (parts.size() == 1)
      ds = std::move(parts[0]);
    else
      ds = std::make_unique<BlendedDataset>(std::move(parts), std::move(weights));
  }
  MOET_CHECK(ds->vocab_size() <= vocab_size, "the data need a vocabulary of ", ds->vocab_size(),
             " tokens but the model's vocab_size is ", vocab_size);
  return ds;
}

}  // namespace moet

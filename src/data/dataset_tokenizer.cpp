#include "data/dataset_tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/open_dataset.h"
#include "data/tokenizer.h"

namespace moet {

namespace fs = std::filesystem;

namespace {

bool is_byte(const std::string& spec) { return spec.empty() || spec == "byte"; }
std::string record_path(const std::string& prefix) { return prefix + ".moet.json"; }
std::string copy_path(const std::string& prefix) { return prefix + ".tokenizer.json"; }

}  // namespace

void record_dataset_tokenizer(const std::string& prefix, const std::string& spec,
                              const Tokenizer& tokenizer) {
  nlohmann::json rec = {{"tokenizer", "byte"},
                        {"tokenizer_vocab_size", tokenizer.vocab_size()},
                        {"eod_id", tokenizer.eod_id()},
                        {"written_by", "moet data prepare"}};
  if (!is_byte(spec)) {
    write_file_atomically(copy_path(prefix), read_text_file(spec), true);
    rec["tokenizer"] = fs::path(copy_path(prefix)).filename().string();
  }
  write_file_atomically(record_path(prefix), rec.dump(2) + "\n", true);
}

std::optional<std::string> dataset_tokenizer(const std::string& prefix) {
  const std::string path = record_path(prefix);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  nlohmann::json rec;
  try {
    rec = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception&) {
    MOET_FAIL("'", path, "' is not the JSON moet data prepare writes");
  }
  MOET_CHECK(rec.is_object() && rec.contains("tokenizer") && rec["tokenizer"].is_string(), "'",
             path, "' names no tokenizer (a \"tokenizer\" string)");
  const std::string name = rec["tokenizer"].get<std::string>();
  if (name == "byte") return std::string("byte");
  const fs::path file = fs::path(prefix).parent_path() / name;
  MOET_CHECK(fs::is_regular_file(file, ec), "the dataset ", prefix, " was tokenized with ",
             file.string(), " (", path, "), which is missing: copy it back beside the dataset");
  return file.string();
}

bool same_tokenizer(const std::string& a, const std::string& b) {
  if (is_byte(a) || is_byte(b)) return is_byte(a) && is_byte(b);
  if (fs::path(a) == fs::path(b)) return true;
  return read_text_file(a) == read_text_file(b);
}

DataTokenizer data_tokenizer(const std::string& data_spec) {
  DataTokenizer d;
  const std::vector<std::string> prefixes = indexed_prefixes(data_spec);
  d.indexed = !prefixes.empty();
  std::string first;  // the prefix whose record d.spec is
  for (const std::string& p : prefixes) {
    const std::optional<std::string> t = dataset_tokenizer(p);
    if (!t) {
      d.unrecorded.push_back(p);
      continue;
    }
    if (!d.spec) {
      d.spec = t;
      first = p;
      continue;
    }
    MOET_CHECK(same_tokenizer(*d.spec, *t), "--data: ", first, " was tokenized with ", *d.spec,
               " but ", p, " with ", *t, ": a blend's token ids must mean the same text");
  }
  return d;
}

std::string resolve_data_tokenizer(const std::string& flag, const std::string& data_spec,
                                   const std::string& fallback, const char* command) {
  const DataTokenizer d = data_tokenizer(data_spec);
  if (!flag.empty()) {
    MOET_CHECK(!d.spec || same_tokenizer(flag, *d.spec), command, ": the tokenizer ", flag,
               " is not the one ", data_spec, " was prepared with (", *d.spec, ")");
    return flag;
  }
  return d.spec ? *d.spec : fallback;
}

std::string unrecorded_tokenizer_warning(const std::string& data_spec) {
  const DataTokenizer d = data_tokenizer(data_spec);
  if (!d.indexed || d.spec) return "";
  return str(d.unrecorded.front(), " has no record of its tokenizer (",
             record_path(d.unrecorded.front()),
             "; written by another tool?): pass --tokenizer FILE so that the run keeps the "
             "tokenizer its ids mean, for moet eval, generate and export-hf");
}

void check_tokenizer_fits_model(const Tokenizer& tokenizer, int64_t model_vocab,
                                const std::string& whose) {
  const int64_t n = tokenizer.vocab_size();
  MOET_CHECK(n <= model_vocab, whose, " (", tokenizer.describe(), ") has ", n,
             " ids but the model's vocab_size is ", model_vocab,
             ": it is not this model's tokenizer (--tokenizer FILE names the right one)");
  MOET_CHECK(model_vocab <= n + n / 8 + 128, whose, " (", tokenizer.describe(), ") has ", n,
             " ids but the model has ", model_vocab,
             ": it is not this model's tokenizer (--tokenizer FILE names the right one)");
}

}  // namespace moet

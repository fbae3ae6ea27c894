#include "cli/data_commands.h"

#include <unistd.h>

#include <cstdio>

#include "cli/text_format_options.h"
#include "core/error.h"
#include "core/flag_check.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace moet::cli {

CLI::App* add_data_command(CLI::App& app, DataArgs& a) {
  CLI::App* d = app.add_subcommand("data", "prepare and inspect Megatron indexed datasets");
  d->require_subcommand(1);
  CLI::App* p = d->add_subcommand(
      "prepare", "tokenize text or JSONL(.gz) files into a Megatron dataset PREFIX.bin/.idx");
  p->add_option("--input", a.prep.inputs,
                "input files, directories or glob patterns (*.jsonl, *.jsonl.gz: JSON Lines; "
                "others: plain text, .gz decompressed)")
      ->required();
  p->add_option("--tokenizer", a.prep.tokenizer, "'byte' or a Hugging Face tokenizer.json")
      ->capture_default_str();
  p->add_option("--output", a.prep.output, "PREFIX of the PREFIX.bin/.idx to write")->required();
  add_text_format_options(p, a.prep.doc_boundary, a.prep.json_key);
  p->add_option("--workers", a.prep.workers, "tokenizing threads (default: all cores)");
  p->add_option("--on-bad-line", a.prep.on_bad_line,
                "malformed JSONL lines: skip (counted in the summary) or stop")
      ->check(CLI::IsMember({"skip", "stop"}))
      ->capture_default_str();
  p->add_flag("--overwrite", a.prep.overwrite, "replace an existing PREFIX.bin/.idx");
  p->add_flag("--no-progress", a.no_progress, "no progress bar (it is drawn only on a terminal)");
  a.prepare = p;

  CLI::App* i = d->add_subcommand("inspect", "what a Megatron dataset PREFIX.bin/.idx holds");
  i->add_option("PREFIX", a.prefix, "the dataset (PREFIX.bin and PREFIX.idx)")->required();
  i->add_option("--doc", a.doc, "print the token ids of document N (0-based)");
  i->add_option("--tokenizer", a.tokenizer,
                "with --doc: also print the document's text decoded by this tokenizer");
  a.inspect = i;
  return d;
}

namespace {

int run_prepare(const DataArgs& a) {
  const bool bar = !a.no_progress && ::isatty(fileno(stderr));
  const PrepareResult r = prepare_data(a.prep, bar ? stderr : nullptr);
  const double mb = double(r.input_bytes) / 1e6;
  std::printf(
      "moet data prepare: %zu files (%.1f MB) -> %s.bin/.idx: %lld documents, %lld tokens (%s, "
      "%.1f MB) in %.2f s, %.1f MB/s",
      r.files.size(), mb, a.prep.output.c_str(), (long long)r.documents, (long long)r.tokens,
      r.dtype.c_str(), double(r.output_bytes) / 1e6, r.seconds, r.seconds > 0 ? mb / r.seconds : 0);
  if (r.skips.malformed > 0)
    std::printf("; %lld malformed JSONL lines skipped", (long long)r.skips.malformed);
  if (r.skips.missing_key > 0)
    std::printf("; skipped: %s", r.skips.missing_key_note(a.prep.json_key).c_str());
  std::printf("\n");
  return 0;
}

int run_inspect(const DataArgs& a) {
  if (a.doc) check_flag_at_least("--doc", *a.doc, 0);
  const IndexedDataset ds(a.prefix);
  std::printf("%s: %s tokens, %lld sequences, %lld documents, %lld tokens (.bin %lld bytes)\n",
              a.prefix.c_str(), indexed_dtype_name(ds.dtype_code()).c_str(),
              (long long)ds.num_sequences(), (long long)ds.num_documents(),
              (long long)ds.num_tokens(), (long long)ds.bin_bytes());
  if (!a.doc) return 0;
  const int64_t doc = *a.doc;
  MOET_CHECK(doc < ds.num_documents(), "--doc ", doc, ": ", a.prefix, " has ", ds.num_documents(),
             " documents");
  std::vector<int32_t> ids;
  for (int64_t s = ds.document_boundary(doc); s < ds.document_boundary(doc + 1); ++s) {
    const std::vector<int32_t> seq = ds.sequence(s);
    ids.insert(ids.end(), seq.begin(), seq.end());
  }
  std::printf("document %lld: %zu tokens\n", (long long)doc, ids.size());
  for (size_t k = 0; k < ids.size(); ++k) std::printf("%s%d", k ? " " : "", ids[k]);
  std::printf("\n");
  if (!a.tokenizer.empty()) std::printf("%s\n", load_tokenizer(a.tokenizer)->decode(ids).c_str());
  return 0;
}

}  // namespace

int run_data(const DataArgs& a) {
  if (a.prepare->parsed()) return run_prepare(a);
  return run_inspect(a);
}

}  // namespace moet::cli

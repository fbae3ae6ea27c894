#include "cli/tokenizer_commands.h"

#include <omp.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/text_format_options.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/flag_check.h"
#include "core/warning.h"
#include "data/bpe_trainer.h"
#include "data/dataset.h"
#include "data/documents.h"
#include "data/prepare.h"
#include "data/text_bytes.h"
#include "data/tokenizer.h"

namespace moet::cli {

namespace {

std::string read_stdin() {
  std::ostringstream s;
  s << std::cin.rdbuf();
  return s.str();
}

void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    const auto r = std::to_chars(buf, buf + sizeof(buf), ids[i]);
    out.append(buf, r.ptr);
  }
  out += '\n';
}

void write_stdout(const std::string& s) {
  MOET_CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size(), "cannot write to stdout");
}

int run_tokenizer_train(const TokenizerArgs& a) {
  check_flag_in_range("--vocab-size", a.vocab_size, int64_t(1), int64_t(1) << 21);  // ids < 2^21
  check_flag_positive("--min-frequency", a.min_frequency);
  check_flag_threads(a.threads);
  MOET_CHECK(a.overwrite || !std::filesystem::exists(a.output), "'", a.output,
             "' exists; pass --overwrite to replace it");
  const std::vector<std::string> files = expand_inputs(a.inputs);
  // the documents, read as every reader of text reads them (data/prepare.h): JSONL's document
  // field, plain text split at the document boundary
  const DocBoundary boundary = a.doc_boundary;
  std::vector<std::string> docs;
  JsonlSkips skips;
  SingleDocumentFiles single(boundary);
  for (const auto& f : files) {
    const size_t before = docs.size();
    for_each_file_document(
        f, a.json_key, boundary, [&](std::string_view d) { docs.emplace_back(d); }, &skips);
    if (!is_jsonl_path(f)) single.add(f, int64_t(docs.size() - before));
  }
  MOET_CHECK(!docs.empty(), no_documents_message(files.size(), skips, a.json_key),
             "; nothing written to ", a.output);
  single.warn();
  if (skips.missing_key > 0) warn("skipped " + skips.missing_key_note(a.json_key));
  std::vector<std::string_view> texts(docs.begin(), docs.end());
  BpeTrainOptions o;
  o.vocab_size = a.vocab_size;
  o.special_tokens = a.special_tokens;
  o.min_frequency = a.min_frequency;
  o.threads = a.threads;
  BpeTrainStats st;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string json = train_bpe(texts, o, &st);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_file_atomically(a.output, json, a.overwrite);
  std::printf(
      "wrote %s: %lld ids (%zu special, 256 bytes, %lld merges) from %zu files (%zu documents), "
      "%.1f MB, %lld words (%lld distinct) in %.1f s\n",
      a.output.c_str(), static_cast<long long>(o.special_tokens.size() + 256 + st.merges),
      o.special_tokens.size(), static_cast<long long>(st.merges), files.size(), docs.size(),
      st.bytes / 1e6, static_cast<long long>(st.words), static_cast<long long>(st.unique_words),
      secs);
  if (static_cast<int64_t>(o.special_tokens.size()) + 256 + st.merges < a.vocab_size)
    std::printf(
        "note: the corpus had no more pairs seen %lld times or more; the vocab is smaller "
        "than --vocab-size %lld\n",
        static_cast<long long>(a.min_frequency), static_cast<long long>(a.vocab_size));
  return 0;
}

int run_tokenizer_encode(const TokenizerArgs& a) {
  check_flag_threads(a.threads);
  MOET_CHECK(a.text.empty() || a.input.empty(), "give --text or --input, not both");
  const auto tok = load_tokenizer(a.tokenizer);
  if (!a.input.empty()) {
    // One text per line (its newline left out), encoded in parallel; one line of ids each.
    const std::string data = read_text_file(a.input);
    std::vector<std::string_view> lines;
    for (size_t b = 0; b < data.size();) {
      size_t e = data.find('\n', b);
      if (e == std::string::npos) e = data.size();
      lines.push_back(std::string_view(data).substr(b, e - b));
      b = e + 1;
    }
    // --jsonl: each line is a JSON string or an object with a "text" string.
    std::vector<std::string> parsed;
    if (a.jsonl) {
      parsed.reserve(lines.size());
      for (size_t i = 0; i < lines.size(); ++i) {
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(lines[i]);
        } catch (const nlohmann::json::exception&) {
          throw Error(str("'", a.input, "' line ", i + 1, " is not JSON"));
        }
        if (j.is_object() && j.contains("text")) j = j["text"];
        MOET_CHECK(j.is_string(), "'", a.input, "' line ", i + 1,
                   " is neither a JSON string nor an object with a \"text\" string");
        parsed.push_back(j.get<std::string>());
      }
      for (size_t i = 0; i < lines.size(); ++i) lines[i] = parsed[i];
    }
    std::vector<std::vector<int32_t>> ids(lines.size());
    const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 64) num_threads(threads)
    for (int64_t i = 0; i < static_cast<int64_t>(lines.size()); ++i) {
      try {
        ids[i] = tok->encode(lines[i], a.add_special);
      } catch (...) {
#pragma omp critical
        error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string out;
    size_t n_tokens = 0;
    for (const auto& v : ids) {
      append_ids(out, v);
      n_tokens += v.size();
    }
    write_stdout(out);
    if (a.timing)
      std::fprintf(
          stderr, "encoded %zu lines, %.3f MB, %zu tokens in %.4f s: %.2f MB/s, %d threads\n",
          lines.size(), data.size() / 1e6, n_tokens, secs, data.size() / 1e6 / secs, threads);
    return 0;
  }
  const std::string text = a.text.empty() ? read_stdin() : a.text;
  const std::vector<int32_t> ids = tok->encode(text, a.add_special);
  std::string out;
  append_ids(out, ids);
  if (!a.ids_only) {
    out = std::to_string(ids.size()) + " tokens: " + out;
    for (int32_t id : ids)
      out += std::to_string(id) + "\t" +
             nlohmann::json(utf8_replace_invalid(tok->decode(&id, 1))).dump() + "\n";
  }
  write_stdout(out);
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    int64_t v = 0;
    const auto r = std::from_chars(word.data(), word.data() + word.size(), v);
    MOET_CHECK(
        r.ec == std::errc() && r.ptr == word.data() + word.size() && v >= 0 && v <= INT32_MAX, "'",
        word, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int run_tokenizer_decode(const TokenizerArgs& a) {
  const auto tok = load_tokenizer(a.tokenizer);
  if (!a.input.empty()) {
    // One line of ids per text; each text printed as a JSON string on its own line.
    std::istringstream file(read_text_file(a.input));
    std::string line, out;
    while (std::getline(file, line)) {
      const std::vector<int32_t> ids = parse_ids(line);
      out += nlohmann::json(tok->decode(ids))
                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out += '\n';
    }
    write_stdout(out);
    return 0;
  }
  write_stdout(tok->decode(parse_ids(a.ids.empty() ? read_stdin() : a.ids)));
  return 0;
}

}  // namespace

CLI::App* add_tokenizer_command(CLI::App& app, TokenizerArgs& a) {
  CLI::App* c = app.add_subcommand(
      "tokenizer", "train a byte-level BPE tokenizer, encode text, decode ids (docs/tokenizer.md)");
  c->require_subcommand(1);
  a.train = c->add_subcommand("train", "train a byte-level BPE tokenizer.json on text files");
  a.train
      ->add_option("--input", a.inputs,
                   "text or JSONL files (.gz too), directories of them or globs, read as moet "
                   "data prepare reads them: a JSONL line's --json-key field, plain text split "
                   "at --doc-boundary")
      ->required();
  add_text_format_options(a.train, a.doc_boundary, a.json_key);
  a.train->add_option("--vocab-size", a.vocab_size, "ids in all: special tokens + 256 + merges")
      ->required();
  a.train->add_option("--output", a.output, "the tokenizer.json to write")->required();
  a.train->add_option("--special-tokens", a.special_tokens, "special tokens (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  a.train->add_option("--min-frequency", a.min_frequency, "merge only pairs seen this often")
      ->capture_default_str();
  a.train->add_option("--threads", a.threads, "word-counting threads (default: all cores)");
  a.train->add_flag("--overwrite", a.overwrite, "replace an existing --output");

  a.encode = c->add_subcommand("encode", "print the token ids of a text");
  a.encode->add_option("--tokenizer", a.tokenizer, "'byte' or a tokenizer.json")
      ->capture_default_str();
  a.encode->add_option("--text", a.text, "the text (default: all of stdin)");
  a.encode->add_option("--input", a.input,
                       "a file whose every line is one text: one line of ids per line");
  a.encode->add_flag("--jsonl", a.jsonl,
                     "--input: each line is a JSON string or an object with a \"text\" string");
  a.encode->add_flag("--ids-only", a.ids_only, "print only the ids, space-separated");
  a.encode->add_flag("--add-special-tokens", a.add_special,
                     "frame each text as the post-processor does (e.g. a BOS first)");
  a.encode->add_option("--threads", a.threads, "threads for --input (default: all cores)");
  a.encode->add_flag("--timing", a.timing, "--input: print the encoding speed to stderr");

  a.decode = c->add_subcommand("decode", "print the text of token ids");
  a.decode->add_option("--tokenizer", a.tokenizer, "'byte' or a tokenizer.json")
      ->capture_default_str();
  a.decode->add_option("--ids", a.ids, "ids separated by spaces (default: read from stdin)");
  a.decode->add_option("--input", a.input,
                       "a file of one line of ids per text: prints each text as a JSON string "
                       "on its own line");
  return c;
}

int run_tokenizer(const TokenizerArgs& a) {
  if (a.train->parsed()) return run_tokenizer_train(a);
  if (a.encode->parsed()) return run_tokenizer_encode(a);
  return run_tokenizer_decode(a);
}

}  // namespace moet::cli

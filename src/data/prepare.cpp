#include "data/prepare.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/flag_check.h"
#include "core/json_depth_limit.h"
#include "data/dataset.h"
#include "data/dataset_tokenizer.h"
#include "data/documents.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace moet {
namespace {

namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 1 << 20;  // input bytes one worker task tokenizes

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A file read through zlib: gzip-compressed or plain alike.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    f_ = gzopen(path.c_str(), "rb");
    MOET_CHECK(f_ != nullptr, "cannot open input file '", path, "'");
    gzbuffer(f_, 1 << 18);
  }
  ~InputFile() { gzclose(f_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Appends up to n bytes; returns how many (0 at the end).
  size_t read(std::string& out, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    const int got = gzread(f_, out.data() + at, unsigned(n));
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f_, &err);
      MOET_FAIL("error reading '", path_, "': ", msg ? msg : "zlib error",
                " (a damaged or truncated .gz file?)");
    }
    out.resize(at + size_t(got));
    return size_t(got);
  }
  // Bytes of the file (compressed bytes for .gz) consumed so far.
  int64_t offset() const { return int64_t(gzoffset(f_)); }

 private:
  std::string path_;
  gzFile f_;
};

// A worker's task: JSONL lines (parsed in the worker) or documents of plain text.
struct Chunk {
  const std::string* file = nullptr;
  bool jsonl = false;
  int64_t first_line = 0;  // 1-based line number of items[0] (JSONL)
  std::vector<std::string> items;
  size_t bytes = 0;
};

struct Tokenized {
  std::vector<int32_t> tokens;   // all documents, each followed by the EOD
  std::vector<int64_t> lengths;  // tokens of each document, EOD included
  JsonlSkips skips;
};

constexpr size_t kKeysSeen = 6;  // keys of key-less objects remembered for the message

// Passes the `key` string of a JSONL line to `doc`; counts a line without it in `skips` (`where`
// names the line for the first malformed one). A blank line is no document and not skipped.
void jsonl_document(const std::string& line, const std::string& key,
                    const std::function<void(std::string_view)>& doc, JsonlSkips& skips,
                    const std::function<std::string()>& where) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  std::string why;
  try {
    const auto j = nlohmann::json::parse(line, json_depth_limit("JSONL line"), true);
    if (!j.is_object()) {
      why = "not a JSON object";
    } else if (!j.contains(key)) {
      ++skips.missing_key;
      for (auto it = j.begin(); it != j.end() && skips.keys_seen.size() < kKeysSeen; ++it)
        if (std::find(skips.keys_seen.begin(), skips.keys_seen.end(), it.key()) ==
            skips.keys_seen.end())
          skips.keys_seen.push_back(it.key());
      return;
    } else if (!j[key].is_string()) {
      why = "\"" + key + "\" is not a string";
    } else {
      doc(j[key].get_ref<const std::string&>());
      return;
    }
  } catch (const std::exception& e) {
    why = std::string("not valid JSON (") + e.what() + ")";
  }
  if (skips.malformed++ == 0) skips.first_malformed = where() + ": " + why;
}

Tokenized tokenize(const Chunk& c, const Tokenizer& tok, const std::string& key) {
  Tokenized out;
  auto add = [&](std::string_view text) {
    if (text.empty()) return;  // an empty document adds nothing (as in text datasets)
    const size_t before = out.tokens.size();
    tok.encode_append(text, out.tokens);
    out.tokens.push_back(tok.eod_id());
    out.lengths.push_back(int64_t(out.tokens.size() - before));
  };
  for (size_t i = 0; i < c.items.size(); ++i) {
    if (!c.jsonl) {
      add(c.items[i]);
      continue;
    }
    jsonl_document(c.items[i], key, add, out.skips,
                   [&] { return str(*c.file, ":", c.first_line + int64_t(i)); });
  }
  return out;
}

std::string hms(double s) {
  const auto t = int64_t(s + 0.5);
  return t >= 3600 ? str(t / 3600, ":", (t / 60 % 60) / 10, t / 60 % 10, ":", (t % 60) / 10, t % 10)
                   : str(t / 60, ":", (t % 60) / 10, t % 10);
}

// The one progress line, redrawn at most every 0.2 s (and at the end).
class ProgressBar {
 public:
  ProgressBar(std::FILE* out, int64_t total) : out_(out), total_(total) {}
  void update(int64_t bytes, int64_t docs, bool final = false) {
    if (!out_) return;
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    const double rate = s > 0 ? double(bytes) / s : 0;
    const double pct = total_ > 0 ? 100.0 * double(bytes) / double(total_) : 100.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "\rprepare: %.1f / %.1f MB (%3.0f%%) | %lld documents | %.1f MB/s | ETA %s ",
                  double(bytes) / 1e6, double(total_) / 1e6, pct, (long long)docs, rate / 1e6,
                  rate > 0 ? hms(double(total_ - bytes) / rate).c_str() : "?");
    std::fputs(line, out_);
    if (final) std::fputc('\n', out_);
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// Bytes of a file (0 when it cannot be asked).
int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : int64_t(n);
}

// Chunks tokenized by worker tasks and written to the dataset in the order they were read (so
// the output does not depend on the worker count), at most 2 × workers of them in flight.
class ChunkPipeline {
 public:
  ChunkPipeline(const PrepareOptions& o, const Tokenizer& tok, IndexedDatasetWriter& writer,
                JsonlSkips& skips)
      : o_(o),
        tok_(tok),
        writer_(writer),
        skips_(skips),
        workers_(o.workers > 0 ? o.workers
                               : std::max(1, int(std::thread::hardware_concurrency()))) {}

  void submit(Chunk&& c) {
    if (c.items.empty()) return;
    while (int64_t(inflight_.size()) >= 2 * int64_t(workers_)) write_oldest();
    inflight_.push_back(std::async(
        std::launch::async, [c = std::move(c), this] { return tokenize(c, tok_, o_.json_key); }));
  }
  // Writes the chunks still in flight.
  void finish() {
    while (!inflight_.empty()) write_oldest();
  }

 private:
  // The oldest chunk's documents into the dataset; its skipped lines counted, or refused under
  // --on-bad-line stop.
  void write_oldest() {
    Tokenized t = inflight_.front().get();
    inflight_.pop_front();
    MOET_CHECK(t.skips.malformed == 0 || o_.on_bad_line == "skip", t.skips.first_malformed,
               " (malformed JSONL line; --on-bad-line skip skips and counts such lines)");
    MOET_CHECK(t.skips.missing_key == 0 || o_.on_bad_line == "skip",
               t.skips.missing_key_note(o_.json_key),
               " (--on-bad-line skip skips and counts such lines)");
    skips_.merge(t.skips);
    const int32_t* p = t.tokens.data();
    for (int64_t n : t.lengths) {
      writer_.add_document(p, n);
      p += n;
    }
  }

  const PrepareOptions& o_;
  const Tokenizer& tok_;
  IndexedDatasetWriter& writer_;
  JsonlSkips& skips_;
  const int workers_;
  std::deque<std::future<Tokenized>> inflight_;
};

// Plain text: read whole (progress() after each read), then split into documents, which go to
// the workers in chunks of about kChunkBytes. Returns how many documents the file holds.
int64_t read_text_file(const std::string& file, InputFile& in, DocBoundary boundary,
                       ChunkPipeline& chunks, const std::function<void()>& progress) {
  Chunk c;
  c.file = &file;
  std::string text;
  while (in.read(text, 1 << 20) > 0) progress();
  int64_t documents = 0;
  for_each_document(text, boundary, [&](std::string_view doc) {
    ++documents;
    c.items.emplace_back(doc);
    c.bytes += doc.size();
    if (c.bytes >= kChunkBytes) chunks.submit(std::exchange(c, Chunk{&file, false, 0, {}, 0}));
  });
  chunks.submit(std::move(c));
  return documents;
}

// JSON Lines: read as the file streams in (progress() after each read), the lines going to the
// workers, which parse them, in chunks of about kChunkBytes.
void read_jsonl_file(const std::string& file, InputFile& in, ChunkPipeline& chunks,
                     const std::function<void()>& progress) {
  Chunk c;
  c.file = &file;
  c.jsonl = true;
  c.first_line = 1;
  std::string buf;
  size_t at = 0;
  int64_t line = 1;
  bool eof = false;
  while (!eof || at < buf.size()) {
    size_t nl = buf.find('\n', at);
    if (nl == std::string::npos && !eof) {
      buf.erase(0, at);
      at = 0;
      eof = in.read(buf, 1 << 20) == 0;
      progress();
      continue;
    }
    if (nl == std::string::npos) nl = buf.size();
    c.items.emplace_back(buf, at, nl - at);
    c.bytes += nl - at + 1;
    at = nl + 1;
    ++line;
    if (c.bytes >= kChunkBytes) chunks.submit(std::exchange(c, Chunk{&file, true, line, {}, 0}));
  }
  chunks.submit(std::move(c));
}

void check_prepare_options(const PrepareOptions& o) {
  MOET_CHECK(!o.output.empty(), "--output PREFIX is required");
  MOET_CHECK(o.on_bad_line == "skip" || o.on_bad_line == "stop", "--on-bad-line '", o.on_bad_line,
             "' is not known: skip or stop");
  MOET_CHECK(!o.json_key.empty(), "--json-key must not be empty");
  check_flag_in_range("--workers", o.workers, 0, kMaxThreads);
}

}  // namespace

bool is_jsonl_path(const std::string& path) {
  return ends_with(path, ".jsonl") || ends_with(path, ".jsonl.gz");
}

PrepareResult prepare_data(const PrepareOptions& o, std::FILE* progress) {
  const auto t0 = std::chrono::steady_clock::now();
  check_prepare_options(o);
  PrepareResult r;
  r.files = expand_inputs(o.inputs);
  for (const std::string& f : r.files) r.input_bytes += file_bytes(f);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(o.tokenizer);
  const IndexedDType dtype = optimal_indexed_dtype(tok->vocab_size());
  r.dtype = indexed_dtype_name(uint8_t(dtype));
  IndexedDatasetWriter writer(o.output, dtype, o.overwrite);
  SingleDocumentFiles single(o.doc_boundary);
  ProgressBar bar(progress, r.input_bytes);
  int64_t done_bytes = 0;  // input files finished
  ChunkPipeline chunks(o, *tok, writer, r.skips);
  for (const std::string& file : r.files) {
    InputFile in(file);
    const auto show = [&] { bar.update(done_bytes + in.offset(), writer.documents()); };
    if (is_jsonl_path(file))
      read_jsonl_file(file, in, chunks, show);
    else
      single.add(file, read_text_file(file, in, o.doc_boundary, chunks, show));
    done_bytes += file_bytes(file);
    bar.update(done_bytes, writer.documents());
  }
  chunks.finish();
  MOET_CHECK(writer.documents() > 0, no_documents_message(r.files.size(), r.skips, o.json_key),
             "; nothing written to ", o.output, ".bin/.idx");
  r.bad_lines = r.skips.total();
  // the tokenizer beside the data (PREFIX.moet.json), written before the pair is published:
  // whoever reads PREFIX.bin/.idx finds it
  record_dataset_tokenizer(o.output, o.tokenizer, *tok);
  writer.finish();
  bar.update(done_bytes, writer.documents(), true);
  single.warn();
  r.documents = writer.documents();
  r.tokens = writer.tokens();
  r.output_bytes = writer.bin_bytes();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void for_each_file_document(const std::string& path, const std::string& json_key,
                            DocBoundary boundary, const std::function<void(std::string_view)>& doc,
                            JsonlSkips* skips) {
  InputFile in(path);
  std::string text;
  while (in.read(text, 1 << 20) > 0) {
  }
  if (!is_jsonl_path(path)) return for_each_document(text, boundary, doc);
  JsonlSkips local;
  int64_t line = 0;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    ++line;
    jsonl_document(text.substr(at, nl - at), json_key, doc, local,
                   [&] { return str(path, ":", line); });
    at = nl + 1;
  }
  if (skips) skips->merge(local);
}

void JsonlSkips::merge(const JsonlSkips& o) {
  if (malformed == 0 && o.malformed > 0) first_malformed = o.first_malformed;
  malformed += o.malformed;
  missing_key += o.missing_key;
  for (const std::string& k : o.keys_seen)
    if (keys_seen.size() < kKeysSeen &&
        std::find(keys_seen.begin(), keys_seen.end(), k) == keys_seen.end())
      keys_seen.push_back(k);
}

std::string JsonlSkips::missing_key_note(const std::string& key) const {
  if (missing_key == 0) return "";
  std::string keys;
  for (const std::string& k : keys_seen) keys += (keys.empty() ? "" : ", ") + k;
  // the key most likely to hold text: one whose name says so, else the first seen
  const auto likely = [&]() -> std::string {
    for (const char* word : {"text", "content", "body", "document", "raw_content", "story"})
      for (const std::string& k : keys_seen)
        if (k == word) return k;
    return keys_seen.empty() ? "" : keys_seen.front();
  };
  const std::string suggest = likely();
  return str(missing_key, " JSONL line", missing_key == 1 ? " has" : "s have", " no \"", key,
             "\" field", keys.empty() ? "" : " (their keys: " + keys + ")",
             suggest.empty() ? "" : "; --json-key " + suggest + " reads them");
}

std::string no_documents_message(size_t files, const JsonlSkips& skips, const std::string& key) {
  std::string msg = str("no documents in the input (", files, files == 1 ? " file)" : " files)");
  if (skips.missing_key > 0) msg += ": " + skips.missing_key_note(key);
  if (skips.malformed > 0)
    msg += str(skips.missing_key > 0 ? ", and " : ": ", skips.malformed, " malformed JSONL line",
               skips.malformed == 1 ? "" : "s", " (first: ", skips.first_malformed, ")");
  return msg;
}

}  // namespace moet

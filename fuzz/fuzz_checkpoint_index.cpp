// libFuzzer target: the checkpoint.json parser (src/checkpoint/checkpoint_index.h) and the
// "crc32c:xxxxxxxx" parser on arbitrary bytes. A moet::Error is the expected rejection. An
// index the parser accepts must satisfy what readers rely on (pieces in order, covering each
// tensor exactly once, in listed plain files) and survive a round trip: formatting it and
// parsing the text again gives an equal index, and formatting that gives the same text.
// Anything else (a crash, a sanitizer report, another exception, a hang, or a broken
// invariant, which aborts naming it) is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "checkpoint/checkpoint_index.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "checkpoint index fuzz finding: %s\n", what.c_str());
  std::abort();
}

// parse_crc32c_string accepts exactly "crc32c:" and eight lower-case hex digits, and
// crc32c_string writes that text back.
void check_crc32c_text(const std::string& text) {
  uint32_t v = 0;
  try {
    v = moet::parse_crc32c_string(text, "fuzz input");
  } catch (const moet::Error&) {
    return;
  }
  if (moet::crc32c_string(v) != text) finding("crc32c text does not round-trip: " + text);
}

void check_invariants(const moet::CheckpointIndex& ix) {
  const std::set<std::string> files(ix.files.begin(), ix.files.end());
  if (files.size() != ix.files.size()) finding("a file is listed twice");
  for (const std::string& f : ix.files)
    if (!moet::plain_file_name(f)) finding("file name with a directory: " + f);
  for (const auto& [name, t] : ix.tensors) {
    if (name.empty()) finding("a tensor without a name");
    int64_t covered = 0;
    for (const moet::PieceRef& p : t.pieces) {
      if (!files.count(p.file)) finding("tensor '" + name + "' names an unlisted file");
      if (p.begin != covered || p.n <= 0) finding("tensor '" + name + "' has a gap or overlap");
      covered += p.n;
    }
    if (covered != moet::shape_numel(t.shape)) finding("tensor '" + name + "' is not covered");
  }
  if (ix.total_bytes() < 0) finding("negative total_bytes()");
}

bool same_pieces(const std::vector<moet::PieceRef>& a, const std::vector<moet::PieceRef>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].file != b[i].file || a[i].key != b[i].key || a[i].begin != b[i].begin ||
        a[i].n != b[i].n || a[i].crc != b[i].crc)
      return false;
  return true;
}

bool same_index(const moet::CheckpointIndex& a, const moet::CheckpointIndex& b) {
  if (a.step != b.step || a.consumed_samples != b.consumed_samples || a.tokens != b.tokens ||
      a.seed != b.seed || a.data_cursor != b.data_cursor || a.global_batch != b.global_batch ||
      a.adam_steps != b.adam_steps || a.run != b.run || a.model_config != b.model_config ||
      a.files != b.files || a.tensors.size() != b.tensors.size())
    return false;
  for (auto i = a.tensors.begin(), j = b.tensors.begin(); i != a.tensors.end(); ++i, ++j)
    if (i->first != j->first || i->second.shape != j->second.shape ||
        !same_pieces(i->second.pieces, j->second.pieces))
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_crc32c_text(text);

  moet::CheckpointIndex ix;
  try {
    ix = moet::parse_checkpoint_index(text, "fuzz input");
  } catch (const moet::Error&) {
    return 0;  // the expected rejection
  }
  check_invariants(ix);
  const std::string formatted = moet::format_checkpoint_index(ix);
  moet::CheckpointIndex again;
  try {
    again = moet::parse_checkpoint_index(formatted, "the formatted index");
  } catch (const moet::Error& e) {
    finding(std::string("a formatted index does not parse: ") + e.what());
  }
  if (!same_index(ix, again)) finding("format then parse changed the index");
  if (moet::format_checkpoint_index(again) != formatted) finding("formatting is not stable");
  return 0;
}

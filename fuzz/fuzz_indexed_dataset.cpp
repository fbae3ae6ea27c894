// libFuzzer target: the Megatron index parser (IndexedDataset, src/data/indexed_dataset.h) on
// arbitrary bytes. The input's first two bytes give the size of the token file (.bin, filled
// with a fixed byte pattern); the rest is the .idx. Both are in-memory files (memfd) opened by
// their /proc/self/fd paths, so the reader runs unchanged, mmap included. A moet::Error is the
// expected rejection. An index the parser accepts must satisfy what readers rely on: every
// sequence inside .bin, document boundaries ascending from 0 to the sequence count, the token
// count the sum of the lengths, and every sequence readable in full (a negative or too large
// token of an int8/int16/int64 file may be refused, as one moet::Error). Anything else is a
// finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "indexed dataset fuzz finding: %s\n", what.c_str());
  std::abort();
}

struct MemFile {
  int fd = -1;
  std::string path;

  explicit MemFile(const char* name) {
    fd = ::memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) finding("memfd_create failed");
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  void write(const uint8_t* data, size_t size) const {
    if (::ftruncate(fd, 0) != 0) finding("ftruncate failed");
    size_t done = 0;
    while (done < size) {
      const ssize_t w = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (w <= 0) finding("pwrite failed");
      done += static_cast<size_t>(w);
    }
  }
};

void check_invariants(const moet::IndexedDataset& ds, size_t bin_size) {
  const int64_t w = ds.dtype_bytes();
  if (w <= 0) finding("accepted an unknown dtype");
  int64_t tokens = 0;
  for (int64_t i = 0; i < ds.num_sequences(); ++i) {
    const int64_t len = ds.sequence_length(i), ptr = ds.sequence_pointer(i);
    if (len < 0 || ptr < 0 || uint64_t(ptr) + uint64_t(len) * uint64_t(w) > bin_size)
      finding("a sequence outside .bin was accepted");
    tokens += len;
  }
  if (tokens != ds.num_tokens()) finding("num_tokens is not the sum of the lengths");
  if (ds.num_documents() < 0 || ds.document_boundary(0) != 0 ||
      ds.document_boundary(ds.num_documents()) != ds.num_sequences())
    finding("document index does not run from 0 to the sequence count");
  for (int64_t d = 0; d < ds.num_documents(); ++d)
    if (ds.document_boundary(d + 1) < ds.document_boundary(d)) finding("document index descends");
  for (int64_t i = 0; i < ds.num_sequences(); ++i) {
    try {
      if (int64_t(ds.sequence(i).size()) != ds.sequence_length(i)) finding("short read");
    } catch (const moet::Error&) {
      // a token that no int32 holds (int8/int16/int64 data) refused: fine
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const MemFile idx("moet_fuzz_idx"), bin("moet_fuzz_bin");
  if (size < 2) return 0;
  const size_t bin_size = size_t(data[0]) | (size_t(data[1]) << 8);
  std::vector<uint8_t> tokens(bin_size);
  for (size_t i = 0; i < bin_size; ++i) tokens[i] = uint8_t(i * 37 + 1);
  bin.write(tokens.data(), tokens.size());
  idx.write(data + 2, size - 2);
  try {
    const moet::IndexedDataset ds(idx.path, bin.path, "fuzz input");
    check_invariants(ds, bin_size);
  } catch (const moet::Error&) {
    return 0;  // the expected rejection
  }
  return 0;
}

// A file mapped read-only into memory, whole, for as long as the object lives: safetensors
// checkpoints and Megatron datasets read their bytes in place through it.
#pragma once
#include <cstddef>
#include <string>

namespace moet {

class MappedFile {
 public:
  MappedFile() = default;  // maps nothing
  // Opens `path` read-only and maps all of it (an empty file maps nothing: data() is null).
  // Throws one moet::Error line naming the path otherwise: "cannot open WHAT 'PATH': reason",
  // "'PATH' is not a regular file" or "cannot map WHAT 'PATH': reason", where `what` says what
  // the file is ("safetensors file", "Megatron index").
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void unmap();

  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace moet

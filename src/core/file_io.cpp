#include "core/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moet {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MOET_CHECK(in.good(), "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  MOET_CHECK(!in.bad(), "error reading '", path, "'");
  return ss.str();
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  MOET_CHECK(fd >= 0, "cannot open '", path, "' to sync it: ", std::strerror(errno));
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  MOET_CHECK(ok, "cannot sync '", path, "': ", std::strerror(err));
}

void write_file_atomically(const std::string& path, const std::string& text, bool overwrite,
                           bool durable) {
  namespace fs = std::filesystem;
  MOET_CHECK(!path.empty(), "output file path is empty");
  std::error_code ec;
  const auto refuse_existing = [&] { return !overwrite && fs::exists(path, ec); };
  MOET_CHECK(!refuse_existing(), "'", path, "' already exists; refusing to overwrite it");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const auto fail_removing_tmp = [&](const std::string& what, int err) {
    std::remove(tmp.c_str());
    MOET_FAIL(what, ": ", std::strerror(err));
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MOET_CHECK(f, "cannot create '", tmp, "': ", std::strerror(errno));
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
                     std::fflush(f) == 0 && (!durable || ::fsync(::fileno(f)) == 0);
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed)
    fail_removing_tmp("cannot write '" + tmp + "'", wrote ? errno : write_errno);
  if (refuse_existing()) {
    std::remove(tmp.c_str());
    MOET_FAIL("'", path, "' already exists; refusing to overwrite it");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    fail_removing_tmp("cannot rename '" + tmp + "' to '" + path + "'", errno);
  if (durable) {
    const fs::path dir = fs::path(path).parent_path();
    fsync_path(dir.empty() ? "." : dir.string(), true);
  }
}

std::string user_cache_dir() {
  if (const char* d = std::getenv("MOET_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/moet";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/moet";
  return "";
}

}  // namespace moet

#include "core/file_io.h"

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

}  // namespace moet

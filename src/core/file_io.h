// Whole-file reads for configs, indexes and other small text files.
#pragma once
#include <string>

namespace moet {

// The bytes of `path`; throws moet::Error "cannot open 'PATH'" (or a read error) otherwise.
std::string read_text_file(const std::string& path);

}  // namespace moet

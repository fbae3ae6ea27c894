// CLI11 validators for what moet's checks cannot see once a flag is parsed: CLI11 turns "-1"
// given to an unsigned flag into 2^64 - 1, so such flags refuse a sign before conversion.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace moet::cli {

// Digits only: "--seed: must be an integer >= 0, got -1" (CLI11 prefixes the flag's name).
inline CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        return digits ? std::string() : "must be an integer >= 0, got " + s;
      },
      "");
}

}  // namespace moet::cli

// "Did you mean ...?" for the command line: the nearest known name by edit distance, and the
// one-line error for a mistyped flag or subcommand (docs/training.md, "Flags").
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/suggest.h"

namespace moet::cli {

using moet::edit_distance;  // core/suggest.h
using moet::nearest_name;

// The command names of `app` (its subcommands), as "a, b, c".
std::string command_list(const CLI::App& app);

// Walks argv through `root`'s subcommands and returns the error line for the first argument the
// command it reaches does not know: "unknown flag --stpes (did you mean --steps?)" or "unknown
// command 'data prepar' (did you mean 'prepare'? commands: ...)"; "" when every flag is known (the
// error is another one).
std::string unknown_argument_line(const CLI::App& root, int argc, const char* const* argv);

}  // namespace moet::cli

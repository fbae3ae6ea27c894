// "Did you mean ...?" for the command line: the nearest known name by edit distance, and the
// one-line error for a mistyped flag or subcommand (docs/training.md, "Flags").
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace moet::cli {

// Levenshtein distance (insertions, deletions, substitutions; a swap of neighbours counts 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is close (distance at most 1 + a third of the
// word's length, so "--stpes" finds "--steps" but "--x" finds nothing; a one-letter "-s" finds
// nothing either).
std::string nearest_name(std::string_view word, const std::vector<std::string>& candidates);

// The command names of `app` (its subcommands), as "a, b, c".
std::string command_list(const CLI::App& app);

// Walks argv through `root`'s subcommands and returns the error line for the first argument the
// command it reaches does not know: "unknown flag --stpes (did you mean --steps?)" or "unknown
// command 'data prepar' (did you mean 'prepare'? commands: ...)"; "" when every flag is known (the
// error is another one).
std::string unknown_argument_line(const CLI::App& root, int argc, const char* const* argv);

}  // namespace moet::cli

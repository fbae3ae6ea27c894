// "Did you mean ...?": the nearest known name by edit distance, for mistyped flags, commands and
// config fields.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace moet {

// Levenshtein distance (insertions, deletions, substitutions; a swap of neighbours counts 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is close (distance at most 1 + a third of the
// word's length, so "--stpes" finds "--steps" but "--x" finds nothing; a one-letter "-s" finds
// nothing either).
std::string nearest_name(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace moet

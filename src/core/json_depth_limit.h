// A bound on how deeply a JSON file may nest. nlohmann::json parses any depth without recursion,
// but copying, comparing or printing the value recurses once per level, so a hostile file that
// nests 100,000 arrays overflows the stack later on. Parsers of files moet did not necessarily
// write pass this callback to nlohmann::json::parse to reject such input as one moet::Error.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "core/error.h"

namespace moet {

// Objects and arrays, one inside the other, including the outermost. Far deeper than any file
// moet reads (a few levels) and far shallower than the stack allows.
inline constexpr int kMaxJsonDepth = 64;

// The error is `what` (e.g. "safetensors file 'x' has a corrupt JSON header") and the depth.
inline nlohmann::json::parser_callback_t json_depth_limit(std::string what) {
  using Event = nlohmann::json::parse_event_t;
  return [what = std::move(what)](int depth, Event event, nlohmann::json&) {
    // `depth` counts the objects and arrays around the one starting here.
    const bool starts = event == Event::object_start || event == Event::array_start;
    MOET_CHECK(!starts || depth < kMaxJsonDepth, what, ": JSON nested deeper than ", kMaxJsonDepth,
               " levels");
    return true;
  };
}

}  // namespace moet

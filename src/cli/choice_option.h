// A flag that takes one of a few words (--precision, --schedule, --doc-boundary, ...), parsed into
// its enum as the command line is read.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moet::cli {

// A word outside `choices` is one line naming them (as check_flag_choice words it).
template <typename E>
CLI::Option* add_choice_option(CLI::App* app, const std::string& flag, E& target,
                               const std::vector<std::pair<std::string, E>>& choices,
                               const std::string& help) {
  std::string names, current;
  for (const auto& [name, value] : choices) {
    names += (names.empty() ? "" : ", ") + name;
    if (value == target) current = name;
  }
  return app
      ->add_option_function<std::string>(
          flag,
          [&target, choices, flag, names](const std::string& word) {
            for (const auto& [name, value] : choices)
              if (name == word) {
                target = value;
                return;
              }
            throw CLI::ValidationError(flag + " '" + word + "' is not one of " + names);
          },
          help)
      ->default_str(current);
}

}  // namespace moet::cli

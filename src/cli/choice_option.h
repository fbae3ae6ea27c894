// A flag that takes one of a few words (--precision, --schedule, --doc-boundary, ...), parsed into
// its enum as the command line is read.
#pragma once
#include <CLI/CLI.hpp>
#include <optional>
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

// A flag that takes one or more words (`--recompute-modules a b c`), each one of `choices`; given
// again, its words join the list.
template <typename E>
CLI::Option* add_choices_option(CLI::App* app, const std::string& flag, std::vector<E>& target,
                                const std::vector<std::pair<std::string, E>>& choices,
                                const std::string& help) {
  std::string names;
  for (const auto& [name, value] : choices) names += (names.empty() ? "" : ", ") + name;
  return app
      ->add_option_function<std::vector<std::string>>(
          flag,
          [&target, choices, flag, names](const std::vector<std::string>& words) {
            target.clear();
            for (const std::string& word : words) {
              bool known = false;
              for (const auto& [name, value] : choices)
                if (name == word) {
                  target.push_back(value);
                  known = true;
                }
              if (!known)
                throw CLI::ValidationError(flag + " '" + word + "' is not one of " + names);
            }
          },
          help)
      ->expected(1, -1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// The choices of an enum as the choices of an optional one (unset until the flag is given).
template <typename E>
std::vector<std::pair<std::string, std::optional<E>>> optional_choices(
    const std::vector<std::pair<std::string, E>>& choices) {
  std::vector<std::pair<std::string, std::optional<E>>> out;
  for (const auto& [name, value] : choices) out.emplace_back(name, value);
  return out;
}

}  // namespace moet::cli

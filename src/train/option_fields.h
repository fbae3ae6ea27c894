// Every `moet train` option described once: its group and key in run.json / checkpoint.json, its
// flag, its help, and a typed way to reach it in TrainOptions. to_json, train_options_from_json,
// the command line's flags (cli/train_commands.cpp) and docs/training.md's table of options are
// all made from this one table (train_option_fields()), so an option is added in two places: its
// member in train_options.h and its row in option_fields.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "train/train_options.h"

namespace moet {

// A member of TrainOptions, as a function that returns a reference to it.
template <typename T>
using OptionRef = T& (*)(TrainOptions&);

// An option whose values are words (an enum, an optional enum, or a list of them): its words and
// how to read and set them.
struct ChoiceRef {
  std::vector<std::string> words;  // the valid words
  bool list = false;               // several words (--recompute-modules a b)
  bool nullable = false;           // unset is a value (written as null)
  std::function<std::vector<std::string>(const TrainOptions&)> get;  // the current word(s)
  // Sets from words; returns the first word that is not valid ("" when all are).
  std::function<std::string(TrainOptions&, const std::vector<std::string>&)> set;
};

using OptionAccess =
    std::variant<OptionRef<bool>, OptionRef<int>, OptionRef<int64_t>, OptionRef<uint64_t>,
                 OptionRef<double>, OptionRef<std::string>, OptionRef<std::optional<int64_t>>,
                 OptionRef<std::optional<uint64_t>>, OptionRef<std::optional<double>>, ChoiceRef>;

// How the command line takes the option.
enum class FlagStyle : uint8_t {
  kNone,           // not a flag
  kValue,          // --flag VALUE (a bool: --flag alone)
  kValueShown,     // the same, --help showing the default
  kRequired,       // --model
  kOptionalValue,  // --flag [VALUE] (--tensorboard)
};

struct OptionField {
  const char* group;  // to_json's group ("data", "optim", ...; "" at the top)
  const char* key;    // the key in it
  const char* flags;  // CLI11's names, aliases after commas ("--overwrite,--overwrite-metrics")
  FlagStyle style;
  const char* help;
  OptionAccess access;
};

// The table, in the order of `moet train --help`.
const std::vector<OptionField>& train_option_fields();

// The field's value as run.json writes it.
nlohmann::json option_json(const OptionField& f, const TrainOptions& o);
// Sets the field from run.json's value (null keeps the default); a wrong type or word is one
// moet::Error line naming `where`, the group and the key.
void set_option_from_json(const OptionField& f, TrainOptions& o, const nlohmann::json& v,
                          const std::string& where);

// The markdown table docs/training.md holds ("| flag | run.json | default |" and a row per
// option with a flag), made from the table and the defaults of TrainOptions{}.
std::string train_options_markdown();

}  // namespace moet

// `moet train`'s flags, bound to TrainOptions (train/train_options.h); the choices among a few
// words are parsed into their enums here, once.
#pragma once
#include <CLI/CLI.hpp>

#include "train/train_options.h"

namespace moet::cli {

CLI::App* add_train_command(CLI::App& app, TrainOptions& o);

}  // namespace moet::cli

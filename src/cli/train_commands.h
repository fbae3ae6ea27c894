// `moet train`'s flags, bound to TrainOptions (train/train_options.h); the choices among a few
// words are parsed into their enums here, once.
#pragma once
#include <CLI/CLI.hpp>

#include "train/train_options.h"

namespace moet::cli {

CLI::App* add_train_command(CLI::App& app, TrainOptions& o);

// Runs `moet train` with the options `t` parsed (and the --config file main() read): under mpirun
// every rank joins the job (a plain `moet train` never touches MPI), the run directory's
// defaults, the data's tokenizer and a --seq that fits the model are filled in, and a failure
// ends every rank (refused before training began: one line from the first refusing rank, a clean
// exit everywhere; later: the whole job aborts, naming the rank). Returns the exit status.
int run_train(TrainOptions& o, const CLI::App& t, int& argc, char**& argv,
              const std::string& config_file);

}  // namespace moet::cli

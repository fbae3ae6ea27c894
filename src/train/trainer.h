// The `moet train` loop: data, model, optimizer, progress lines and metrics.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "train/train_options.h"

namespace moet {

class Communicator;
class SetupAgreement;

// Checks the options (check_train_options, check_train_layout: one clear moet::Error line per
// problem, before any output is created) and trains. world: the processes
// of an mpirun job (data parallelism, --ep expert parallelism), or null for one process.
// setup: where the ranks agree that every rank's checks passed, before the first collective
// (null: no agreement; a rank that fails its checks then leaves the others waiting).
// Returns the final loss.
double run_training(const TrainOptions& opts, Communicator* world = nullptr,
                    SetupAgreement* setup = nullptr);

}  // namespace moet

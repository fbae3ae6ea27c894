// A `moet train` run set up, before its first step: everything checked (one error line, before any
// output exists), the data opened and planned, the layout built (parallelize), the step runner,
// the state restored from a checkpoint or initialised, the outputs opened and the header printed.
// The loop (trainer.cpp) then only runs steps.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/training_state.h"
#include "data/dataset.h"
#include "data/prefetch.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/checkpointing.h"
#include "train/parallelize.h"
#include "train/step_record.h"
#include "train/train_outputs.h"
#include "train/train_step.h"

namespace moet {

struct TrainOptions;
class Communicator;
class SetupAgreement;

struct TrainSession {
  const TrainOptions& o;
  Communicator* world = nullptr;
  int ranks = 1, rank = 0;
  bool verbose = false;  // rank 0 without --quiet: progress and notes
  ModelConfig cfg;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenDataset> data;
  std::unique_ptr<TrainCheckpoints> checkpoints;
  std::unique_ptr<TrainOutputs> outputs;
  std::unique_ptr<ParallelRun> par;
  std::unique_ptr<StepRunner> runner;
  std::unique_ptr<StepRecorder> recorder;
  StateHolder state;       // what a checkpoint saves and restores
  DataShape data_shape;    // what fixes the order of the data
  int64_t first_step = 0;  // > 0 when resuming

  explicit TrainSession(const TrainOptions& options) : o(options) {}
  // Fills tokens() with step `step`'s micro-batches for this rank; returns the seconds it waited.
  double read_batch(int64_t step);
  // Micro-batch a of the batch read_batch() filled.
  const int32_t* micro_batch(int64_t a) const;
  std::vector<int32_t>& tokens() { return tokens_; }

 private:
  friend std::unique_ptr<TrainSession> start_training(const TrainOptions&, Communicator*,
                                                      SetupAgreement*);
  std::vector<int32_t> tokens_;
  std::optional<BatchPrefetcher> prefetcher_;  // this rank's sequences, prepared ahead
};

// Checks, reads, builds, restores, opens the outputs and prints the header. setup: where the
// ranks agree that every rank's checks passed before the first collective (null: none).
std::unique_ptr<TrainSession> start_training(const TrainOptions& o, Communicator* world,
                                             SetupAgreement* setup);

}  // namespace moet

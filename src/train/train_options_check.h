// The checks of `moet train`'s options, run before anything is read, built or written: every
// flag alone (NaN, Inf, negative, out of range), the combinations that cannot work, and those
// that depend on the model and the number of processes. Each refusal is one moet::Error line
// that names the flag (docs/training.md, "Flags").
#pragma once
#include <string>

#include "model/config.h"
#include "optim/lr_schedule.h"
#include "train/train_options.h"

namespace moet {

class Communicator;

// The options alone: each numeric flag's range, the choices of the string flags, and the
// combinations the trainer cannot run (--deterministic with --a2a-overlap, an odd micro-batch
// under --a2a-overlap, --save-every without --out, ...).
void check_train_options(const TrainOptions& o);

// The options against the model and the processes (world: null for one process): --ep, --pp,
// --zero1 need mpirun; --pp divides the ranks and --ep a stage's; the experts split over --ep;
// --seq within max_position_embeddings; the pipeline's layout and schedule.
void check_train_layout(const TrainOptions& o, const ModelConfig& cfg, const Communicator* world);

// --seq not given: when the default (256) exceeds the model's max_position_embeddings, sets
// o.seq to it and returns true (the caller announces it). A config that cannot be read is left
// to the run's checks (returns false).
bool fit_default_seq_to_model(TrainOptions& o);

// The run directory as the run's home: with --out RUN, the metrics go to RUN/metrics.jsonl unless
// --metrics says otherwise, and a --tensorboard given without a directory to RUN/tensorboard
// (refused without --out). `tensorboard_asked`: --tensorboard was given.
void apply_run_directory_defaults(TrainOptions& o, bool tensorboard_asked);

// --tokenizer as the data say (data/dataset_tokenizer.h): on Megatron data, the tokenizer they
// were prepared with (a --tokenizer given must be that one); on text, --tokenizer or bytes ("").
// Afterwards o.data.tokenizer names it, for reading text, run.json and the run directory's copy
// ("" where Megatron data without a record meet no --tokenizer: the run keeps none).
void resolve_train_tokenizer(TrainOptions& o);

// An output file a run may create without --overwrite: absent, or an empty regular file (what a
// run killed before it wrote anything leaves; it must not block the rerun).
bool output_absent_or_empty(const std::string& path);

// The learning-rate schedule of the options, with the defaults of --min-lr (lr / 10) and
// --warmup (min(200, steps / 10)) filled in.
LrSchedule train_lr_schedule(const TrainOptions& o);

}  // namespace moet

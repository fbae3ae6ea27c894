// What `moet train` prints on rank 0 before step 1: short notes while it starts up (what it is
// doing, so several seconds are not silent) and the header that describes the run — model,
// precision, data, the batch (under mpirun: the layout, micro-batch x grad-accum x DP = global
// batch, the communication mode --overlap chose), the peak MFU divides by, memory, pipeline,
// resume and checkpoints. All on stdout; nothing with --quiet or on other ranks.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "measure/gemm_peak.h"
#include "measure/recipe_choice.h"
#include "metrics/memory.h"
#include "model/recipe.h"
#include "train/parallelize.h"
#include "train/train_options.h"

namespace moet {

// "moet train: building the model ..." (and a flush), when `verbose`.
void startup_note(bool verbose, const std::string& what);

// The same note, but only if the work it names is still running after `delay_s`: reading data
// is usually instant (and then says nothing, so that a refused --data stays one line), but a
// large text corpus takes seconds to tokenize. The note is printed by a waiting thread; the
// destructor (the work is done) cancels it.
class DelayedNote {
 public:
  DelayedNote(bool verbose, std::string what, double delay_s = 1.0);
  ~DelayedNote();
  DelayedNote(const DelayedNote&) = delete;
  DelayedNote& operator=(const DelayedNote&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread waiter_;
};

struct RunHeader {
  const TrainOptions* options = nullptr;
  const ModelConfig* config = nullptr;
  ParallelRun* run = nullptr;
  int world_size = 1;
  double flops_per_token = 0;
  RecipeChoice recipe;  // what --precision resolved to, where its GEMMs run, and why
  std::string data;     // the dataset's description
  GemmPeaks peaks;      // the GEMM peaks and what MFU divides by
  MemoryNeed memory;
  int64_t rss_before_model = 0;
  std::vector<int64_t> activations_per_rank;  // --pp: every rank's activation bytes
  std::string resume_dir;                     // "" unless resuming
  int64_t first_step = 0;
  bool saving = false;  // checkpoints are written
};

// The header lines (the caller checks that this is the verbose rank 0).
void print_run_header(const RunHeader& h);

}  // namespace moet

// Background batch preparation: a thread fills the token batches of the next steps while the
// current step trains, so the step waits for data only when the data cannot keep up.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace moet {

// Fills steps first_step, first_step + 1, ..., last_step - 1 in order, each as `micro_batches`
// micro-batches of `count` sequences (this rank's, from global sequence `first_seq`) of T + 1
// tokens, up to `depth` steps ahead of the consumer. The batches are exactly what
// ds.fill_sequences gives for (step, micro, first_seq, count, T): prefetching changes no data.
// An error while filling is rethrown by take() of that step.
class BatchPrefetcher {
 public:
  BatchPrefetcher(const TokenDataset& ds, int64_t first_step, int64_t last_step,
                  int64_t micro_batches, int64_t first_seq, int64_t count, int64_t T,
                  int depth = 2);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Copies step `step`'s tokens ([micro_batches][count][T + 1]) into out and returns the
  // seconds it waited for them. Steps are taken in order, each once.
  double take(int64_t step, int32_t* out);

 private:
  void run();

  const TokenDataset& ds_;
  const int64_t first_step_, last_step_, micro_batches_, first_seq_, count_, T_;
  const int64_t depth_, batch_elems_;
  std::vector<std::vector<int32_t>> slots_;  // slot step % depth holds that step's batch
  std::vector<std::exception_ptr> errors_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t filled_;  // steps < filled_ are ready
  int64_t taken_;   // steps < taken_ have been consumed
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace moet

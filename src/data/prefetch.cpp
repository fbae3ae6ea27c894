#include "data/prefetch.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace moet {

BatchPrefetcher::BatchPrefetcher(const TokenDataset& ds, int64_t first_step, int64_t last_step,
                                 int64_t micro_batches, int64_t first_seq, int64_t count, int64_t T,
                                 int depth)
    : ds_(ds),
      first_step_(first_step),
      last_step_(last_step),
      micro_batches_(micro_batches),
      first_seq_(first_seq),
      count_(count),
      T_(T),
      depth_(std::max(1, depth)),
      batch_elems_(micro_batches * count * (T + 1)),
      slots_(size_t(depth_), std::vector<int32_t>(size_t(batch_elems_))),
      errors_(size_t(depth_)),
      filled_(first_step),
      taken_(first_step) {
  thread_ = std::thread([this] { run(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchPrefetcher::run() {
  for (int64_t step = first_step_; step < last_step_; ++step) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || step - taken_ < depth_; });
      if (stop_) return;
    }
    // The slot is the consumer's no more: fill it without the lock.
    const auto slot = size_t(step % depth_);
    std::exception_ptr error;
    try {
      for (int64_t a = 0; a < micro_batches_; ++a)
        ds_.fill_sequences(step, a, first_seq_, count_, T_,
                           slots_[slot].data() + a * count_ * (T_ + 1));
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      errors_[slot] = error;
      filled_ = step + 1;
    }
    cv_.notify_all();
    if (error) return;  // the consumer rethrows it when it reaches this step
  }
}

double BatchPrefetcher::take(int64_t step, int32_t* out) {
  MOET_ASSERT(step == taken_ && step < last_step_);
  const auto t0 = std::chrono::steady_clock::now();
  const auto slot = size_t(step % depth_);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return filled_ > step; });
    if (errors_[slot]) std::rethrow_exception(errors_[slot]);
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::copy(slots_[slot].begin(), slots_[slot].end(), out);
  {
    std::lock_guard<std::mutex> lock(mu_);
    taken_ = step + 1;
  }
  cv_.notify_all();
  return waited;
}

}  // namespace moet

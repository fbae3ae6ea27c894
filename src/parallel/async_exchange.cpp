#include "parallel/async_exchange.h"

#include <chrono>

namespace moet {

void AsyncExchange::issue(std::function<void()> op, const char* what, const char* category,
                          int64_t bytes) {
  auto timed = [this, op = std::move(op)] {
    auto t0 = std::chrono::steady_clock::now();
    op();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  if (!stream_) {  // nothing hides it
    const double before = seconds_;
    inline_.run(what, category, bytes, timed);
    exposed_ += seconds_ - before;
    return;
  }
  in_flight_ = stream_->submit(std::move(timed), what, category, bytes);
}

void AsyncExchange::complete() {
  if (stream_ && in_flight_) exposed_ += stream_->wait(in_flight_);
  in_flight_ = 0;
}

void AsyncExchange::run_now(std::function<void()> op, const char* what, const char* category,
                            int64_t bytes) {
  if (stream_)
    stream_->wait(stream_->submit(std::move(op), what, category, bytes));
  else
    inline_.run(what, category, bytes, op);
}

}  // namespace moet

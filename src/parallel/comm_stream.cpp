#include "parallel/comm_stream.h"

#include <chrono>

#include "core/trace.h"

namespace moet {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

CommStream::CommStream() : thread_([this] { run(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

CommStream::Ticket CommStream::submit(std::function<void()> op, const char* what,
                                      const char* category, int64_t bytes) {
  if (trace_) trace_->add_in_flight(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back({std::move(op), what, category, bytes});
  ++submitted_;
  work_cv_.notify_one();
  return submitted_;
}

double CommStream::wait(Ticket t) {
  const double t0 = now_s();
  const double tr0 = trace_ ? trace_->now_s() : 0;
  std::unique_lock<std::mutex> lock(mu_);
  const bool blocks = done_ < t && !error_;
  done_cv_.wait(lock, [&] { return done_ >= t || error_; });
  if (error_) std::rethrow_exception(error_);
  const double w = now_s() - t0;
  lock.unlock();
  // the time the training thread stood still (a wait that finds the op done records nothing)
  if (trace_ && blocks)
    trace_->complete(trace_wait_lane_, "wait for comm thread", tr0, trace_->now_s(), trace::kWait);
  return w;
}

void CommStream::run() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    const double tr0 = trace_ ? trace_->now_s() : 0;
    try {
      op.fn();
      if (trace_) {
        trace_->complete(trace_lane_, op.what, tr0, trace_->now_s(), op.category);
        trace_->add_in_flight(-op.bytes);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      done_cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    done_cv_.notify_all();
  }
}

void CommStream::set_trace(TraceRecorder* rec) {
  trace_ = rec;
  if (!rec) return;
  trace_wait_lane_ = rec->lane(trace::kComputeLane);  // first: the compute lane shows on top
  trace_lane_ = rec->lane(trace::kCommLane);
}

void InlineCommTrace::set_trace(TraceRecorder* rec) {
  rec_ = rec;
  if (rec) lane_ = rec->lane(trace::kComputeLane);
}

}  // namespace moet

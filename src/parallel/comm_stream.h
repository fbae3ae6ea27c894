// CommStream: a communication thread. Collectives submitted to it run there one after another,
// in submission order (the same order on every rank, so they match up), while the submitting
// thread goes on computing; wait() blocks until a submitted operation has finished. This is how
// moet hides the expert all-to-alls and the gradient reductions behind compute: the thread
// drives MPI, so the transfer really progresses during the compute (measured by the time each
// wait() blocks: the exposed part).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/trace.h"

namespace moet {

class CommStream {
 public:
  using Ticket = int64_t;
  CommStream();
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Queues op; `what` names it in errors and in the trace, where it is a span of `category`
  // (trace::kDispatch, ...) on the "comm" lane, and `bytes` (what this rank contributes) count
  // as in flight from now until it has run. Returns its ticket.
  Ticket submit(std::function<void()> op, const char* what, const char* category = nullptr,
                int64_t bytes = 0);
  // Blocks until the op with this ticket (and every earlier one) has run; rethrows an error an
  // op raised. Returns the seconds spent blocked (traced as a trace::kWait span on the "compute"
  // lane: the caller is the training thread).
  double wait(Ticket t);
  double wait_all() { return wait(submitted_); }

  // Records every op as a span on the recorder's "comm" lane, and every wait on its "compute"
  // lane (null: no tracing).
  void set_trace(TraceRecorder* rec);

 private:
  void run();
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  struct Op {
    std::function<void()> fn;
    const char* what;
    const char* category;
    int64_t bytes;
  };
  std::deque<Op> queue_;
  Ticket submitted_ = 0, done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  TraceRecorder* trace_ = nullptr;
  int trace_lane_ = 0, trace_wait_lane_ = 0;
  std::thread thread_;
};

// Where a parallel component records the communication it runs itself, on the calling thread
// (no CommStream): a span of the op's category on the "compute" lane, the op's bytes in flight
// while it runs. Without a recorder it just runs the op.
class InlineCommTrace {
 public:
  void set_trace(TraceRecorder* rec);
  template <typename Op>
  void run(const char* what, const char* category, int64_t bytes, Op&& op) {
    if (!rec_) {
      op();
      return;
    }
    rec_->add_in_flight(bytes);
    {
      TraceRecorder::Span span(rec_, lane_, what, category);
      op();
    }
    rec_->add_in_flight(-bytes);
  }

 private:
  TraceRecorder* rec_ = nullptr;
  int lane_ = 0;
};

}  // namespace moet

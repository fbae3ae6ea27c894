// AsyncExchange: how a dispatcher runs its exchanges — now, or on a CommStream (the
// communication thread) between a *_start and its *_finish — and how long they took and how
// long compute waited for them. One exchange in flight at a time.
#pragma once
#include <functional>

#include "parallel/comm_stream.h"

namespace moet {

class AsyncExchange {
 public:
  void set_stream(CommStream* stream) { stream_ = stream; }
  // Traces every op as a span named `what` of its category: on the "comm" lane with a stream,
  // on the "compute" lane (the caller's thread runs it) without; `bytes` (what this rank sends)
  // count as in flight from issue to completion.
  void set_trace(TraceRecorder* rec) { inline_.set_trace(rec); }
  // Starts op (timed as exchange time); complete() waits for it.
  void issue(std::function<void()> op, const char* what, const char* category, int64_t bytes);
  void complete();
  // Runs op to the end before returning — on the stream when there is one, so collectives keep
  // one order — without counting it as exchange time (small control messages).
  void run_now(std::function<void()> op, const char* what, const char* category, int64_t bytes);

  // Seconds in issued exchanges, and the part the caller waited for (all of it without a
  // stream), since the last reset.
  double seconds() const { return seconds_; }
  double exposed_seconds() const { return exposed_; }
  void reset_timers() { seconds_ = exposed_ = 0; }

 private:
  CommStream* stream_ = nullptr;
  InlineCommTrace inline_;
  CommStream::Ticket in_flight_ = 0;
  double seconds_ = 0, exposed_ = 0;
};

}  // namespace moet

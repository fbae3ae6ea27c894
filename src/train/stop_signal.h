// Graceful stop on SIGTERM (preemption) and SIGINT (Ctrl-C): the handler only records the
// signal; the training loop finishes its step, saves a checkpoint and exits 0. A second signal
// of either kind ends the process at once (the default action).
#pragma once

namespace moet {

class StopSignal {
 public:
  // Installs the handlers; the destructor restores the previous ones.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  // The signal received (SIGTERM, SIGINT), or 0.
  static int received();
  static const char* name(int signal);
};

}  // namespace moet

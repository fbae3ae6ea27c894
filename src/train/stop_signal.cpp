#include "train/stop_signal.h"

#include <csignal>

namespace moet {

namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_term, g_old_int;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {  // the second one: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
}

int StopSignal::received() { return int(g_signal); }

const char* StopSignal::name(int signal) {
  return signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "a signal";
}

}  // namespace moet

// Op profiler: when a profiler is installed on the calling thread, every op records its wall
// time (exclusive of the ops it calls), FLOPs and bytes moved under its name — `moet bench
// --model` turns that into a per-op table of a training step. Off by default: an op then pays
// one thread-local pointer test.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace moet::ops {

struct OpStats {
  int64_t calls = 0;
  double seconds = 0;  // exclusive: time in ops called from this one is theirs
  double flops = 0;    // floating-point operations (GEMMs: 2·M·N·K)
  double bytes = 0;    // bytes read and written (memory-bound ops)
};

class OpProfiler {
 public:
  void add(const char* name, double seconds, double flops, double bytes);
  const std::map<std::string, OpStats>& stats() const { return stats_; }
  void clear() { stats_.clear(); }

 private:
  std::map<std::string, OpStats> stats_;
};

// Installs (or removes, with null) the profiler of the calling thread.
void set_op_profiler(OpProfiler* p);
OpProfiler* op_profiler();

// Times one op call: construct at the op's start with its work, destroyed at its end.
class OpScope {
 public:
  OpScope(const char* name, double flops = 0, double bytes = 0);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* name_ = nullptr;
  double flops_ = 0, bytes_ = 0, child_seconds_ = 0;
  OpScope* parent_ = nullptr;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace moet::ops

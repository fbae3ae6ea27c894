#include "kernels/profile.h"

namespace moet::ops {
namespace {
thread_local OpProfiler* t_profiler = nullptr;
thread_local OpScope* t_open = nullptr;  // innermost open scope of this thread
}  // namespace

void OpProfiler::add(const char* name, double seconds, double flops, double bytes) {
  OpStats& s = stats_[name];
  s.calls += 1;
  s.seconds += seconds;
  s.flops += flops;
  s.bytes += bytes;
}

void set_op_profiler(OpProfiler* p) { t_profiler = p; }
OpProfiler* op_profiler() { return t_profiler; }

OpScope::OpScope(const char* name, double flops, double bytes) {
  if (!t_profiler) return;
  name_ = name;
  flops_ = flops;
  bytes_ = bytes;
  parent_ = t_open;
  t_open = this;
  t0_ = std::chrono::steady_clock::now();
}

OpScope::~OpScope() {
  if (!name_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  t_open = parent_;
  if (parent_) parent_->child_seconds_ += s;
  if (t_profiler) t_profiler->add(name_, s - child_seconds_, flops_, bytes_);
}

}  // namespace moet::ops

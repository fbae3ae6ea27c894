#include "parallel/tp_group.h"

#include <chrono>

namespace moet {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int64_t CommunicatorTpGroup::sum_bytes(int64_t n, int64_t width) const {
  const int64_t P = c_.size(), r = c_.rank(), mine = n * (r + 1) / P - n * r / P;
  return width * ((n - mine) + (P - 1) * mine);
}

template <typename T>
void CommunicatorTpGroup::timed_sum(T* x, int64_t n) {
  TraceRecorder::Span span(trace_, lane_, "tp sum", trace::kTensorParallel);
  const double t0 = now_s();
  c_.allreduce_sum(x, n);
  seconds_ += now_s() - t0;
  bytes_ += sum_bytes(n, int64_t(sizeof(T)));
}

void CommunicatorTpGroup::sum(float* x, int64_t n) { timed_sum(x, n); }
void CommunicatorTpGroup::sum(double* x, int64_t n) { timed_sum(x, n); }

void CommunicatorTpGroup::gather(const void* send, int64_t bytes, void* recv) {
  TraceRecorder::Span span(trace_, lane_, "tp gather", trace::kTensorParallel);
  const double t0 = now_s();
  c_.allgather(send, bytes, recv);
  seconds_ += now_s() - t0;
  bytes_ += (c_.size() - 1) * bytes;
}

void CommunicatorTpGroup::sum_scatter(float* x, int64_t n) {
  TraceRecorder::Span span(trace_, lane_, "tp reduce-scatter", trace::kTensorParallel);
  const double t0 = now_s();
  int64_t begin = 0, mine = 0;
  c_.reduce_scatter_sum(x, n, &begin, &mine);
  seconds_ += now_s() - t0;
  bytes_ += int64_t(sizeof(float)) * (n - mine);  // every slice but this rank's
}

void CommunicatorTpGroup::set_trace(TraceRecorder* trace) {
  trace_ = trace && trace->enabled() ? trace : nullptr;
  if (trace_) lane_ = trace_->lane(trace::kComputeLane);
}

double CommunicatorTpGroup::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

int64_t CommunicatorTpGroup::take_bytes() {
  const int64_t b = bytes_;
  bytes_ = 0;
  return b;
}

}  // namespace moet

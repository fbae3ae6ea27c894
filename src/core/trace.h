// Timeline trace of one rank in the Chrome/Perfetto JSON "Trace Event Format" (docs/trace.md):
// named lanes (threads) of timed spans, counters, kept in memory and written once at the end.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace moet {

// The lanes and categories moet records (docs/trace.md). Names are string literals, as every
// name and category handed to the recorder must be (or come from TraceRecorder::intern).
namespace trace {
// Lanes: the training thread, the communication thread (CommStream), the step/eval markers.
inline constexpr const char* kComputeLane = "compute";
inline constexpr const char* kCommLane = "comm";
inline constexpr const char* kStepsLane = "steps";
// Categories. Markers: a training step, an evaluation (its forwards), a decoder layer's stage.
inline constexpr const char* kStep = "step";
inline constexpr const char* kEval = "eval";
inline constexpr const char* kLayer = "layer";
// A pipeline pass (--pp): F, B, its halves I and W, or an overlapped F&B pair of one
// micro-batch on one model chunk; its layers' spans nest inside.
inline constexpr const char* kPass = "pass";
// Compute: MLA, the MoE router (gate), the routed and shared experts, a dense layer's MLP, the
// LM head, the optimizer step.
inline constexpr const char* kAttention = "attention";
inline constexpr const char* kRouter = "router";
inline constexpr const char* kExperts = "experts";
inline constexpr const char* kMlp = "mlp";
inline constexpr const char* kHead = "head";
inline constexpr const char* kOptimizer = "optimizer";
// Activation recomputation: a layer's forward (or its selected modules) made again before its
// backward (--recompute-granularity); the spans of what it runs nest inside.
inline constexpr const char* kRecompute = "recompute";
// Communication: the experts' token exchange out and back (each with its backward), gradient
// reduction (ZeRO-1's reduce-scatter and parameter all-gather included), pipeline messages; and
// the training thread blocked on the communication thread.
inline constexpr const char* kDispatch = "dispatch";
inline constexpr const char* kCombine = "combine";
inline constexpr const char* kGradSync = "grad_sync";
inline constexpr const char* kPipeline = "pipeline";
// --tp: the layers' sums and all-gathers over the tensor-parallel group, on the compute lane.
inline constexpr const char* kTensorParallel = "tp";
inline constexpr const char* kWait = "wait";
// Small collectives for the metrics, after a step (the experts' load over the ep group).
inline constexpr const char* kMetrics = "metrics";
// Counter: bytes of communication issued and not yet completed (TraceRecorder::add_in_flight).
inline constexpr const char* kBytesInFlight = "bytes_in_flight";
}  // namespace trace

// Records spans ("X" events) and counters ("C" events) of one process (rank). Thread-safe:
// any thread may record on any lane. Times are seconds on a steady clock since the recorder was
// constructed (now_s()); the file holds microseconds. Events live in a buffer reserved at
// construction, so recording never allocates; past `max_events` they are counted as dropped.
// A recorder constructed disabled records nothing and allocates nothing: span() is then two
// stores, complete()/counter() a branch.
//
// Event names and categories are `const char*` kept by pointer (not copied): pass string
// literals, or strings from intern() (which live as long as the recorder).
class TraceRecorder {
 public:
  static constexpr size_t kDefaultMaxEvents = size_t{1} << 18;  // ~10 MiB of events

  // `rank` >= 0 becomes the file's pid rank + 1 (Perfetto treats pid 0 as the kernel's idle
  // process); `process_name` labels it ("rank 0").
  TraceRecorder(int rank, std::string process_name, bool enabled = true,
                size_t max_events = kDefaultMaxEvents);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Records [begin, end) on `rec`'s lane from construction to end() or destruction. A null or
  // disabled recorder makes it a no-op. Movable, not copyable.
  class Span {
   public:
    Span() = default;
    Span(TraceRecorder* rec, int lane, const char* name, const char* category = nullptr);
    ~Span() { end(); }
    Span(Span&& o) noexcept { *this = std::move(o); }
    Span& operator=(Span&& o) noexcept {
      if (this != &o) {
        end();
        rec_ = std::exchange(o.rec_, nullptr);
        lane_ = o.lane_;
        name_ = o.name_;
        category_ = o.category_;
        t_begin_s_ = o.t_begin_s_;
      }
      return *this;
    }
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

    // Records the span now (once; later calls and the destructor do nothing).
    void end() noexcept;
    bool active() const { return rec_ != nullptr; }

   private:
    TraceRecorder* rec_ = nullptr;
    int lane_ = 0;
    const char* name_ = nullptr;
    const char* category_ = nullptr;
    double t_begin_s_ = 0;
  };

  bool enabled() const { return enabled_; }
  int rank() const { return rank_; }
  int pid() const { return rank_ + 1; }  // as written in the file
  const std::string& process_name() const { return process_name_; }
  size_t max_events() const { return max_events_; }

  // Seconds since construction on the steady clock.
  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  // The lane (thread) called `name`, registered on first use (a thread_name metadata event);
  // returns its tid as written in the file: pid * 1000 + 1, + 2, ... in order of registration
  // (also the display order), so tids stay distinct when the ranks' files are merged. At most
  // kMaxLanes lanes. Register lanes before the training loop: it locks and may allocate.
  static constexpr int kMaxLanes = 999;
  int lane(const std::string& name);
  // A copy of `s` that lives as long as the recorder, for names built at run time
  // ("layer 3"). Intern once, outside the step: it locks and may allocate.
  const char* intern(const std::string& s);
  // Free-form key/value pairs written under "otherData" (config, world size, ...).
  void set_info(const std::string& key, const std::string& value);

  // A span [t_begin_s, t_end_s) (seconds since construction; an end before the begin records
  // a zero duration). `lane` must come from lane() (moet::Error otherwise).
  void complete(int lane, const char* name, double t_begin_s, double t_end_s,
                const char* category = nullptr);
  // A span from now until the returned Span ends: `auto s = rec.span(lane, "dispatch", ...)`.
  Span span(int lane, const char* name, const char* category = nullptr) {
    return Span(enabled_ ? this : nullptr, lane, name, category);
  }
  // A sample of the counter track `name` (e.g. "bytes_in_flight") at time t_s. Non-finite
  // values are ignored.
  void counter(const char* name, double t_s, double value);
  // Adds `bytes` (negative: removes them) to this rank's communication in flight and samples
  // the trace::kBytesInFlight counter now: called when an operation is issued and when it
  // completes.
  void add_in_flight(int64_t bytes);

  // Events held (spans and counter samples; metadata not counted) and events dropped at the
  // cap.
  size_t recorded() const;
  size_t dropped() const;

  // Writes {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}} to `path` (via
  // path.tmp, then a rename). Refuses (moet::Error) when `path` exists unless `overwrite`.
  // Recording may continue meanwhile; the file holds the events recorded before the call.
  void write(const std::string& path, bool overwrite = false) const;

  // "trace.json" -> "trace.rank3.json" (and "trace" -> "trace.rank3") when world > 1;
  // `path` unchanged when world == 1.
  static std::string per_rank_path(const std::string& path, int rank, int world);

 private:
  struct Event {
    const char* name;
    const char* category;  // null for none
    double ts_us;
    double value;  // 'X': duration in us; 'C': the sample
    int tid;       // 'X' only
    char ph;       // 'X' or 'C'
  };

  void check_lane(int lane) const;
  void push(const Event& e);

  const int rank_;
  const std::string process_name_;
  const bool enabled_;
  const size_t max_events_;
  const std::chrono::steady_clock::time_point start_;
  const int64_t start_unix_us_;

  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
  int64_t in_flight_ = 0;  // add_in_flight
  int lane_tid(size_t index) const { return pid() * 1000 + static_cast<int>(index) + 1; }

  std::vector<std::string> lanes_;  // lanes_[i] has tid lane_tid(i)
  std::atomic<int> lane_count_{0};
  std::unordered_set<std::string> interned_;  // node-based: c_str() stays valid
  std::vector<std::pair<std::string, std::string>> info_;
};

}  // namespace moet

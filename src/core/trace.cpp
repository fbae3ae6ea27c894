#include "core/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace moet {
namespace {

std::string utc_iso8601(int64_t unix_us) {
  const std::time_t t = static_cast<std::time_t>(unix_us / 1000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

TraceRecorder::TraceRecorder(int rank, std::string process_name, bool enabled, size_t max_events)
    : rank_(rank),
      process_name_(std::move(process_name)),
      enabled_(enabled),
      max_events_(max_events),
      start_(std::chrono::steady_clock::now()),
      start_unix_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count()) {
  MOET_CHECK(rank >= 0, "trace: rank must be >= 0, got ", rank);
  if (enabled_) events_.reserve(max_events_);
}

TraceRecorder::Span::Span(TraceRecorder* rec, int lane, const char* name, const char* category)
    : lane_(lane), name_(name), category_(category) {
  if (!rec || !rec->enabled_) return;
  rec->check_lane(lane);
  rec_ = rec;
  t_begin_s_ = rec->now_s();
}

void TraceRecorder::Span::end() noexcept {
  if (!rec_) return;
  TraceRecorder* rec = std::exchange(rec_, nullptr);
  const double t_end_s = rec->now_s();
  // The lane was checked at construction; push() does not allocate (reserved) or throw.
  rec->push(Event{name_, category_, t_begin_s_ * 1e6, std::max(0.0, t_end_s - t_begin_s_) * 1e6,
                  lane_, 'X'});
}

int TraceRecorder::lane(const std::string& name) {
  MOET_CHECK(!name.empty(), "trace: lane name is empty");
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < lanes_.size(); ++i)
    if (lanes_[i] == name) return lane_tid(i);
  MOET_CHECK(lanes_.size() < kMaxLanes, "trace: more than ", kMaxLanes, " lanes");
  lanes_.push_back(name);
  lane_count_.store(static_cast<int>(lanes_.size()), std::memory_order_release);
  return lane_tid(lanes_.size() - 1);
}

const char* TraceRecorder::intern(const std::string& s) {
  std::lock_guard<std::mutex> lock(mu_);
  return interned_.insert(s).first->c_str();
}

void TraceRecorder::set_info(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : info_)
    if (kv.first == key) {
      kv.second = value;
      return;
    }
  info_.emplace_back(key, value);
}

void TraceRecorder::check_lane(int lane) const {
  const int n = lane_count_.load(std::memory_order_acquire);
  MOET_CHECK(lane >= lane_tid(0) && lane < lane_tid(static_cast<size_t>(n)), "trace: unknown lane ",
             lane, " (", n, " registered); get lanes from TraceRecorder::lane(name)");
}

void TraceRecorder::push(const Event& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() < max_events_)
    events_.push_back(e);
  else
    ++dropped_;
}

void TraceRecorder::complete(int lane, const char* name, double t_begin_s, double t_end_s,
                             const char* category) {
  if (!enabled_) return;
  check_lane(lane);
  MOET_CHECK(name, "trace: span name is null");
  push(Event{name, category, t_begin_s * 1e6, std::max(0.0, t_end_s - t_begin_s) * 1e6, lane, 'X'});
}

void TraceRecorder::counter(const char* name, double t_s, double value) {
  if (!enabled_ || !std::isfinite(value)) return;
  MOET_CHECK(name, "trace: counter name is null");
  push(Event{name, nullptr, t_s * 1e6, value, 0, 'C'});
}

void TraceRecorder::add_in_flight(int64_t bytes) {
  if (!enabled_ || bytes == 0) return;
  // The time is read under the lock, so the samples' order in time is the order of the sums.
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_ += bytes;
  const Event e{trace::kBytesInFlight, nullptr, now_s() * 1e6, double(in_flight_), 0, 'C'};
  if (events_.size() < max_events_)
    events_.push_back(e);
  else
    ++dropped_;
}

size_t TraceRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

size_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void TraceRecorder::write(const std::string& path, bool overwrite) const {
  MOET_CHECK(!path.empty(), "trace file path is empty");
  std::error_code ec;
  MOET_CHECK(overwrite || !std::filesystem::exists(path, ec), "trace file '", path,
             "' already exists; refusing to overwrite it (remove it, choose another path, or "
             "ask to overwrite)");

  // Snapshot under the lock, format without it: recording threads never wait on the disk.
  std::vector<Event> events;
  std::vector<std::string> lanes;
  std::vector<std::pair<std::string, std::string>> info;
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = events_;
    lanes = lanes_;
    info = info_;
    dropped = dropped_;
  }
  // Time order; an enclosing span (same start, longer) before what it encloses, which is what
  // chrome://tracing needs to nest them.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.ts_us != b.ts_us) return a.ts_us < b.ts_us;
    return a.ph == 'X' && b.ph == 'X' && a.value > b.value;
  });

  // Microseconds to the nanosecond: the file's resolution (JSON numbers, shortest round trip).
  const auto us = [](double v) { return std::round(v * 1e3) / 1e3; };
  const int pid = this->pid();
  using nlohmann::json;
  // Each event is dumped on its own (one per line) rather than as one document tree, which
  // would take ~100 MB for a full buffer. Names are UTF-8; anything else becomes U+FFFD rather
  // than failing the write.
  std::string out = "{\"traceEvents\":[\n";
  out.reserve(256 + 128 * (events.size() + lanes.size()));
  const auto add = [&](const json& e) {
    if (out.back() != '\n') out += ",\n";
    out += e.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  const auto metadata = [&](const char* name, json args, int tid) {
    json e = {{"ph", "M"}, {"pid", pid}, {"name", name}, {"args", std::move(args)}};
    if (tid) e["tid"] = tid;
    add(e);
  };
  metadata("process_name", {{"name", process_name_}}, 0);
  metadata("process_sort_index", {{"sort_index", rank_}}, 0);
  for (size_t i = 0; i < lanes.size(); ++i) {
    metadata("thread_name", {{"name", lanes[i]}}, lane_tid(i));
    metadata("thread_sort_index", {{"sort_index", static_cast<int64_t>(i) + 1}}, lane_tid(i));
  }
  for (const Event& e : events) {
    json j = {{"ph", std::string(1, e.ph)}, {"pid", pid}, {"name", e.name}, {"ts", us(e.ts_us)}};
    if (e.ph == 'X') {
      j["tid"] = e.tid;
      if (e.category) j["cat"] = e.category;
      j["dur"] = us(e.value);
    } else {
      j["args"] = {{"value", e.value}};
    }
    add(j);
  }
  json other = {{"writer", "moet"},
                {"rank", rank_},
                {"process_name", process_name_},
                {"enabled", enabled_},
                {"events", events.size()},
                {"dropped_events", dropped},
                {"max_events", max_events_},
                {"clock", "steady; ts 0 = recorder start"},
                {"start_time_utc", utc_iso8601(start_unix_us_)},
                {"start_unix_us", start_unix_us_}};
  for (const auto& [key, value] : info) other[key] = value;
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += other.dump(-1, ' ', false, json::error_handler_t::replace);
  out += "}\n";
  write_file_atomically(path, out, overwrite);
}

std::string TraceRecorder::per_rank_path(const std::string& path, int rank, int world) {
  MOET_CHECK(world >= 1, "trace: world size must be >= 1, got ", world);
  MOET_CHECK(rank >= 0 && rank < world, "trace: rank ", rank, " out of range for world size ",
             world);
  if (world == 1) return path;
  const size_t slash = path.find_last_of('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  MOET_CHECK(base < path.size(), "trace path '", path, "' names a directory, not a file");
  size_t dot = path.find_last_of('.');
  // No extension, or a leading dot only (".trace"): append.
  if (dot == std::string::npos || dot <= base) dot = path.size();
  return path.substr(0, dot) + ".rank" + std::to_string(rank) + path.substr(dot);
}

}  // namespace moet

#include "core/trace.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace moet {
namespace {

// `s` as a JSON string literal (quotes included). Names are UTF-8; control characters escaped.
void append_json_string(std::string& out, const char* s) {
  out += '"';
  for (const char* p = s; *p; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void append_fmt(std::string& out, const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  out += buf;
}

void append_int(std::string& out, long long v) { out += std::to_string(v); }

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

  const int pid = this->pid();
  std::string out;
  out.reserve(256 + 128 * (events.size() + lanes.size()));
  out += "{\"traceEvents\":[\n";
  auto begin_event = [&](const char* ph, const char* name) {
    out += "{\"ph\":\"";
    out += ph;
    out += "\",\"pid\":";
    append_int(out, pid);
    out += ",\"name\":";
    append_json_string(out, name);
  };
  begin_event("M", "process_name");
  out += ",\"args\":{\"name\":";
  append_json_string(out, process_name_.c_str());
  out += "}}";
  out += ",\n";
  begin_event("M", "process_sort_index");
  out += ",\"args\":{\"sort_index\":";
  append_int(out, rank_);
  out += "}}";
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int tid = lane_tid(i);
    out += ",\n";
    begin_event("M", "thread_name");
    out += ",\"tid\":";
    append_int(out, tid);
    out += ",\"args\":{\"name\":";
    append_json_string(out, lanes[i].c_str());
    out += "}}";
    out += ",\n";
    begin_event("M", "thread_sort_index");
    out += ",\"tid\":";
    append_int(out, tid);
    out += ",\"args\":{\"sort_index\":";
    append_int(out, static_cast<long long>(i) + 1);
    out += "}}";
  }
  for (const Event& e : events) {
    out += ",\n";
    if (e.ph == 'X') {
      begin_event("X", e.name);
      out += ",\"tid\":";
      append_int(out, e.tid);
      if (e.category) {
        out += ",\"cat\":";
        append_json_string(out, e.category);
      }
      out += ",\"ts\":";
      append_fmt(out, "%.3f", e.ts_us);
      out += ",\"dur\":";
      append_fmt(out, "%.3f", e.value);
      out += "}";
    } else {
      begin_event("C", e.name);
      out += ",\"ts\":";
      append_fmt(out, "%.3f", e.ts_us);
      out += ",\"args\":{\"value\":";
      append_fmt(out, "%.17g", e.value);
      out += "}}";
    }
  }
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{";
  out += "\"writer\":\"moet\",\"rank\":";
  append_int(out, rank_);
  out += ",\"process_name\":";
  append_json_string(out, process_name_.c_str());
  out += ",\"enabled\":";
  out += enabled_ ? "true" : "false";
  out += ",\"events\":";
  append_int(out, static_cast<long long>(events.size()));
  out += ",\"dropped_events\":";
  append_int(out, static_cast<long long>(dropped));
  out += ",\"max_events\":";
  append_int(out, static_cast<long long>(max_events_));
  out += ",\"clock\":\"steady; ts 0 = recorder start\",\"start_time_utc\":";
  append_json_string(out, utc_iso8601(start_unix_us_).c_str());
  out += ",\"start_unix_us\":";
  append_int(out, start_unix_us_);
  for (const auto& [key, value] : info) {
    out += ",";
    append_json_string(out, key.c_str());
    out += ":";
    append_json_string(out, value.c_str());
  }
  out += "}}\n";

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) MOET_FAIL("cannot open trace file '", tmp, "': ", std::strerror(errno));
  const bool wrote = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    const int err = !wrote ? write_errno : errno;
    std::remove(tmp.c_str());
    MOET_FAIL("cannot write trace file '", tmp, "': ", std::strerror(err));
  }
  // Checked again just before the rename, narrowing the window in which another writer could
  // have created `path`.
  if (!overwrite && std::filesystem::exists(path, ec)) {
    std::remove(tmp.c_str());
    MOET_FAIL("trace file '", path, "' already exists; refusing to overwrite it");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    MOET_FAIL("cannot rename '", tmp, "' to trace file '", path, "': ", std::strerror(err));
  }
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

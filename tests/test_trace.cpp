// Chrome/Perfetto trace recorder: file format, concurrency, cap, disabled mode, overwrite rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/trace.h"

namespace fs = std::filesystem;
using namespace moet;
using nlohmann::json;

// Counts heap allocations in this test binary, to check that recording does not allocate.
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC flags free() of what (its model of) operator new returned once these are inlined; here
// they are the replacement pair, so the pairing is right.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow form too (std::stable_sort's buffer): by default it calls the replaced form, but
// where another library replaces it (AddressSanitizer's runtime replaces every form) its memory
// would come to the free() above from another allocator.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("moet_trace_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json write_and_parse(const TraceRecorder& rec, const std::string& name) {
  const std::string path = temp_path(name);
  fs::remove(path);
  rec.write(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const json j = json::parse(read_all(path));  // throws (fails the test) if not valid JSON
  fs::remove(path);
  return j;
}

std::vector<json> events_with_ph(const json& j, const std::string& ph) {
  std::vector<json> out;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == ph) out.push_back(e);
  return out;
}

}  // namespace

TEST(Trace, FileHasMetadataSpansAndCounters) {
  TraceRecorder rec(2, "rank 2");
  const int compute = rec.lane(trace::kComputeLane);
  const int comm = rec.lane(trace::kCommLane);
  EXPECT_EQ(compute, 3001);  // pid * 1000 + 1: distinct across ranks
  EXPECT_EQ(comm, 3002);
  EXPECT_EQ(rec.lane("compute"), compute);  // idempotent
  rec.set_info("config", "tiny.json");

  rec.complete(compute, "attention fwd", 0.001, 0.0025, trace::kAttention);
  rec.complete(comm, "dispatch", 0.002, 0.002125, trace::kDispatch);
  rec.complete(compute, "backwards", 0.004, 0.003);  // end before begin: zero duration
  rec.counter("bytes_in_flight", 0.002, 4096);
  rec.counter("bytes_in_flight", 0.003, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(rec.recorded(), 4u);

  const json j = write_and_parse(rec, "format.json");
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  EXPECT_EQ(j["otherData"]["rank"], 2);
  EXPECT_EQ(j["otherData"]["events"], 4);
  EXPECT_EQ(j["otherData"]["dropped_events"], 0);
  EXPECT_EQ(j["otherData"]["config"], "tiny.json");
  EXPECT_TRUE(j["otherData"]["start_time_utc"].is_string());

  const int pid = 3;  // rank + 1
  EXPECT_EQ(rec.pid(), pid);
  for (const auto& e : j["traceEvents"]) EXPECT_EQ(e["pid"], pid) << e;

  std::map<std::string, json> process_meta;
  std::map<int, std::string> thread_names;
  std::map<int, int> thread_order;
  for (const auto& m : events_with_ph(j, "M")) {
    if (m["name"] == "thread_name")
      thread_names[m["tid"].get<int>()] = m["args"]["name"];
    else if (m["name"] == "thread_sort_index")
      thread_order[m["tid"].get<int>()] = m["args"]["sort_index"];
    else
      process_meta[m["name"]] = m;
  }
  ASSERT_TRUE(process_meta.count("process_name"));
  EXPECT_EQ(process_meta["process_name"]["args"]["name"], "rank 2");
  ASSERT_TRUE(process_meta.count("process_sort_index"));
  EXPECT_EQ(process_meta["process_sort_index"]["args"]["sort_index"], 2);
  EXPECT_EQ(thread_names, (std::map<int, std::string>{{compute, "compute"}, {comm, "comm"}}));
  EXPECT_EQ(thread_order, (std::map<int, int>{{compute, 1}, {comm, 2}}));

  const auto spans = events_with_ph(j, "X");
  ASSERT_EQ(spans.size(), 3u);
  // Written in time order.
  EXPECT_EQ(spans[0]["name"], "attention fwd");
  EXPECT_EQ(spans[0]["tid"], compute);
  EXPECT_EQ(spans[0]["cat"], "attention");
  EXPECT_NEAR(spans[0]["ts"].get<double>(), 1000.0, 1e-6);
  EXPECT_NEAR(spans[0]["dur"].get<double>(), 1500.0, 1e-6);
  EXPECT_EQ(spans[1]["name"], "dispatch");
  EXPECT_EQ(spans[1]["tid"], comm);
  EXPECT_EQ(spans[1]["cat"], "dispatch");
  EXPECT_NEAR(spans[1]["ts"].get<double>(), 2000.0, 1e-6);
  EXPECT_NEAR(spans[1]["dur"].get<double>(), 125.0, 1e-6);
  EXPECT_EQ(spans[2]["name"], "backwards");
  EXPECT_FALSE(spans[2].contains("cat"));
  EXPECT_EQ(spans[2]["dur"].get<double>(), 0.0);

  const auto counters = events_with_ph(j, "C");
  ASSERT_EQ(counters.size(), 1u);  // the NaN sample was ignored
  EXPECT_EQ(counters[0]["name"], "bytes_in_flight");
  EXPECT_NEAR(counters[0]["ts"].get<double>(), 2000.0, 1e-6);
  EXPECT_EQ(counters[0]["args"]["value"].get<double>(), 4096.0);
}

TEST(Trace, SpanMeasuresItsScopeAndEndsOnce) {
  TraceRecorder rec(0, "rank 0");
  const int lane = rec.lane("compute");
  const double before = rec.now_s();
  {
    auto s = rec.span(lane, "experts", trace::kExperts);
    EXPECT_TRUE(s.active());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto moved = std::move(s);  // the moved-from span records nothing
    EXPECT_FALSE(s.active());
  }
  {
    auto s = rec.span(lane, "combine", trace::kCombine);
    s.end();
    s.end();  // once only; the destructor adds nothing either
  }
  const double after = rec.now_s();
  EXPECT_EQ(rec.recorded(), 2u);

  const auto spans = events_with_ph(write_and_parse(rec, "span.json"), "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["name"], "experts");
  EXPECT_EQ(spans[0]["cat"], "experts");
  EXPECT_EQ(spans[0]["pid"], 1);
  const double ts = spans[0]["ts"].get<double>(), dur = spans[0]["dur"].get<double>();
  EXPECT_GE(ts, before * 1e6 - 1e-3);
  EXPECT_GE(dur, 20000.0 - 1e-3);  // microseconds
  EXPECT_LE(ts + dur, after * 1e6 + 1e-3);
  EXPECT_EQ(spans[1]["name"], "combine");
}

TEST(Trace, TwoThreadsLoseNothing) {
  constexpr int kPerThread = 20000;
  TraceRecorder rec(1, "rank 1");
  const int compute = rec.lane(trace::kComputeLane);
  const int comm = rec.lane(trace::kCommLane);
  auto work = [&](int lane, const char* name, const char* cat) {
    for (int i = 0; i < kPerThread; ++i) {
      if (i % 2) {
        auto s = rec.span(lane, name, cat);
      } else {
        rec.complete(lane, name, i * 1e-6, (i + 1) * 1e-6, cat);
      }
      if (i % 100 == 0) rec.counter("bytes_in_flight", rec.now_s(), i);
    }
  };
  std::thread t1(work, compute, "experts", trace::kExperts);
  std::thread t2(work, comm, "dispatch", trace::kDispatch);
  t1.join();
  t2.join();
  const size_t want = 2 * (kPerThread + kPerThread / 100);
  EXPECT_EQ(rec.recorded(), want);
  EXPECT_EQ(rec.dropped(), 0u);

  const json j = write_and_parse(rec, "threads.json");
  std::map<int, int> per_tid;
  for (const auto& e : events_with_ph(j, "X")) {
    ++per_tid[e["tid"].get<int>()];
    EXPECT_EQ(e["name"], e["tid"] == compute ? "experts" : "dispatch");
  }
  EXPECT_EQ(per_tid, (std::map<int, int>{{compute, kPerThread}, {comm, kPerThread}}));
  EXPECT_EQ(events_with_ph(j, "C").size(), size_t{2 * kPerThread / 100});
}

TEST(Trace, CapCountsDroppedEvents) {
  TraceRecorder rec(0, "rank 0", true, 10);
  const int lane = rec.lane("compute");
  for (int i = 0; i < 15; ++i) rec.complete(lane, "step", i, i + 0.5);
  rec.counter("bytes_in_flight", 1.0, 1.0);
  EXPECT_EQ(rec.recorded(), 10u);
  EXPECT_EQ(rec.dropped(), 6u);
  const json j = write_and_parse(rec, "cap.json");
  EXPECT_EQ(events_with_ph(j, "X").size(), 10u);
  EXPECT_EQ(j["otherData"]["dropped_events"], 6);
  EXPECT_EQ(j["otherData"]["max_events"], 10);
}

TEST(Trace, RecordingDoesNotAllocate) {
  TraceRecorder rec(0, "rank 0", true, 1000);
  const int lane = rec.lane("compute");
  const long before = g_allocations.load();
  for (int i = 0; i < 100; ++i) {
    auto s = rec.span(lane, "attention", trace::kAttention);
    rec.complete(lane, "experts", 0.0, 1.0, trace::kExperts);
    rec.counter("bytes_in_flight", 0.5, i);
  }
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(rec.recorded(), 300u);
  ::operator delete(::operator new(16));  // the counter does count
  EXPECT_EQ(g_allocations.load(), before + 1);
}

// add_in_flight keeps the running sum: one bytes_in_flight sample per call, in time order,
// from any thread, without allocating; a disabled recorder records none.
TEST(Trace, BytesInFlightIsARunningSum) {
  TraceRecorder rec(0, "rank 0", true, 1000);
  const long before = g_allocations.load();
  rec.add_in_flight(100);
  rec.add_in_flight(40);
  rec.add_in_flight(0);  // nothing to record
  rec.add_in_flight(-100);
  EXPECT_EQ(g_allocations.load(), before);
  std::thread comm([&] {
    for (int i = 0; i < 50; ++i) rec.add_in_flight(8), rec.add_in_flight(-8);
  });
  for (int i = 0; i < 50; ++i) rec.add_in_flight(2), rec.add_in_flight(-2);
  comm.join();
  rec.add_in_flight(-40);
  const auto c = events_with_ph(write_and_parse(rec, "in_flight.json"), "C");
  ASSERT_EQ(c.size(), 4u + 200u);
  std::vector<double> v;
  for (const auto& e : c) {
    EXPECT_EQ(e["name"], trace::kBytesInFlight);
    v.push_back(e["args"]["value"].get<double>());
  }
  EXPECT_EQ(v[0], 100);
  EXPECT_EQ(v[1], 140);
  EXPECT_EQ(v[2], 40);
  EXPECT_EQ(v.back(), 0);
  // sampled under the lock: in time order the values are the sums in the order they were made,
  // so every step between neighbours is one of the deltas
  for (size_t i = 3; i + 1 < v.size(); ++i) {
    const double d = std::abs(v[i] - v[i - 1]);
    EXPECT_TRUE(d == 2 || d == 8) << i << ": " << v[i - 1] << " -> " << v[i];
    EXPECT_GE(v[i], 40);
  }
  TraceRecorder off(0, "r", false);
  off.add_in_flight(5);
  EXPECT_EQ(off.recorded(), 0u);
}

TEST(Trace, DisabledRecordsNothingAndDoesNotAllocate) {
  const long before_construct = g_allocations.load();
  TraceRecorder rec(0, "r", false);  // short name: no heap for the string either
  EXPECT_FALSE(rec.enabled());
  const int lane = rec.lane("compute");
  const long before = g_allocations.load();
  bool any_active = false;
  for (int i = 0; i < 100; ++i) {
    auto s = rec.span(lane, "attention", trace::kAttention);
    any_active |= s.active();
    rec.complete(lane, "experts", 0.0, 1.0, trace::kExperts);
    rec.counter("bytes_in_flight", 0.5, i);
  }
  TraceRecorder::Span null_span(nullptr, 7, "dispatch");  // the null-recorder pattern
  any_active |= null_span.active();
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_FALSE(any_active);
  EXPECT_LE(g_allocations.load() - before_construct, 2);  // the lane registration only
  EXPECT_EQ(rec.recorded(), 0u);
  EXPECT_EQ(rec.dropped(), 0u);

  const json j = write_and_parse(rec, "disabled.json");  // still a valid, empty trace
  EXPECT_TRUE(events_with_ph(j, "X").empty());
  EXPECT_TRUE(events_with_ph(j, "C").empty());
  EXPECT_EQ(j["otherData"]["enabled"], false);
}

TEST(Trace, UnknownLaneIsAnError) {
  TraceRecorder rec(0, "rank 0");
  rec.lane("compute");
  EXPECT_THROW(rec.complete(1002, "x", 0, 1), Error);
  EXPECT_THROW(rec.complete(1, "x", 0, 1), Error);
  EXPECT_THROW(rec.span(1000, "x"), Error);
  EXPECT_THROW(rec.lane(""), Error);
  EXPECT_THROW(TraceRecorder(-1, "bad"), Error);
}

TEST(Trace, NamesAreEscapedAndInterned) {
  TraceRecorder rec(0, "rank \"0\"");
  const int lane = rec.lane("lane\\with\tescapes");
  const char* name = nullptr;
  {
    std::string built = "layer " + std::to_string(3) + " \"moe\"\n";
    name = rec.intern(built);
  }
  EXPECT_EQ(rec.intern("layer 3 \"moe\"\n"), name);  // same string, same pointer
  rec.complete(lane, name, 0, 1);
  const json j = write_and_parse(rec, "escape.json");
  const auto spans = events_with_ph(j, "X");
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0]["name"], "layer 3 \"moe\"\n");
  EXPECT_EQ(j["otherData"]["process_name"], "rank \"0\"");
}

TEST(Trace, RefusesToOverwriteUnlessAsked) {
  const std::string path = temp_path("exists.json");
  std::ofstream(path) << "precious\n";
  TraceRecorder rec(0, "rank 0");
  rec.complete(rec.lane("compute"), "step", 0, 1);
  try {
    rec.write(path);
    FAIL() << "overwrote an existing trace file without being asked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(path), "precious\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  rec.write(path, true);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(events_with_ph(json::parse(read_all(path)), "X").size(), 1u);
  fs::remove(path);
  EXPECT_THROW(rec.write("/nonexistent_dir_moet/trace.json"), Error);
  EXPECT_THROW(rec.write(""), Error);
}

TEST(Trace, PerRankPath) {
  EXPECT_EQ(TraceRecorder::per_rank_path("trace.json", 0, 1), "trace.json");
  EXPECT_EQ(TraceRecorder::per_rank_path("trace.json", 0, 2), "trace.rank0.json");
  EXPECT_EQ(TraceRecorder::per_rank_path("trace.json", 3, 4), "trace.rank3.json");
  EXPECT_EQ(TraceRecorder::per_rank_path("out/run.1/trace.json", 1, 2),
            "out/run.1/trace.rank1.json");
  EXPECT_EQ(TraceRecorder::per_rank_path("out/run.1/trace", 1, 2), "out/run.1/trace.rank1");
  EXPECT_EQ(TraceRecorder::per_rank_path("trace", 1, 2), "trace.rank1");
  EXPECT_EQ(TraceRecorder::per_rank_path(".trace", 1, 2), ".trace.rank1");
  EXPECT_EQ(TraceRecorder::per_rank_path("/tmp/t.json", 10, 16), "/tmp/t.rank10.json");
  EXPECT_THROW(TraceRecorder::per_rank_path("trace.json", 2, 2), Error);
  EXPECT_THROW(TraceRecorder::per_rank_path("trace.json", 0, 0), Error);
  EXPECT_THROW(TraceRecorder::per_rank_path("out/", 0, 2), Error);
}

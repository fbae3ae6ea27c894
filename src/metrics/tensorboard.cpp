#include "metrics/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"

namespace moet {
namespace {

// Protobuf wire format, the few pieces an Event needs: varint (type 0), 64-bit (1),
// length-delimited (2), 32-bit (5).
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_key(out, field, 1);
  put_le(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_key(out, field, 5);
  put_le(out, bits, 4);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  std::string packed;
  for (double x : v) {
    uint64_t bits;
    std::memcpy(&bits, &x, 8);
    put_le(packed, bits, 8);
  }
  put_bytes(out, field, packed);
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3, summary = 5.
std::string event_with_summary(double wall_time, int64_t step, const std::string& summary) {
  std::string e;
  put_double(e, 1, wall_time);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  put_bytes(e, 5, summary);
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A per-layer field's tag for one layer: the table's "moe/..._layer_L" with L the layer's index.
std::string layer_tag(const MetricField& f, int64_t layer) {
  const std::string tag = f.tb_tag;
  MOET_ASSERT_MSG(!tag.empty() && tag.back() == 'L', "per-layer TensorBoard tag '", tag, "'");
  return tag.substr(0, tag.size() - 1) + std::to_string(layer);
}

// A per-layer field's values with their layers (NaN values left out).
void add_per_layer(std::vector<std::pair<std::string, float>>& out, const StepMetrics& m,
                   const MetricField& f, const std::vector<double>& values) {
  const std::vector<int64_t>& layers = metric_layers(m, f);
  MOET_ASSERT_MSG(values.size() <= layers.size(), f.key, " has more layers than their indices");
  for (size_t i = 0; i < values.size(); ++i)
    if (std::isfinite(values[i])) out.emplace_back(layer_tag(f, layers[i]), float(values[i]));
}

}  // namespace

namespace tensorboard {

uint32_t masked_crc32c(const void* bytes, size_t n) {
  const uint32_t crc = crc32c(bytes, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  std::string out, len;
  put_le(len, data.size(), 8);
  out += len;
  put_le(out, masked_crc32c(len.data(), len.size()), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

std::string file_version_event(double wall_time) {
  std::string e;
  put_double(e, 1, wall_time);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

// Event.session_log = 7: SessionLog{status = 1 (START = 1)}.
std::string session_start_event(double wall_time, int64_t step) {
  std::string e, log;
  put_double(e, 1, wall_time);
  put_key(e, 2, 0);
  put_varint(e, uint64_t(step));
  put_key(log, 1, 0);
  put_varint(log, 1);
  put_bytes(e, 7, log);
  return e;
}

// Summary: value = 1 (repeated); Summary.Value: tag = 1, simple_value = 2 (float), histo = 5.
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, v);
    put_bytes(summary, 1, value);
  }
  return event_with_summary(wall_time, step, summary);
}

// HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6 and bucket 7
// (packed doubles).
std::string histogram_event(double wall_time, int64_t step, const std::string& tag,
                            const Histogram& h) {
  std::string histo;
  put_double(histo, 1, h.min);
  put_double(histo, 2, h.max);
  put_double(histo, 3, h.num);
  put_double(histo, 4, h.sum);
  put_double(histo, 5, h.sum_squares);
  put_packed_doubles(histo, 6, h.bucket_limit);
  put_packed_doubles(histo, 7, h.bucket);
  std::string value, summary;
  put_bytes(value, 1, tag);
  put_bytes(value, 5, histo);
  put_bytes(summary, 1, value);
  return event_with_summary(wall_time, step, summary);
}

}  // namespace tensorboard

Histogram expert_load_histogram(const std::vector<int64_t>& load_E) {
  Histogram h;
  bool any = false;
  for (size_t e = 0; e < load_E.size(); ++e) {
    const double n = double(load_E[e]), x = double(e);
    h.bucket_limit.push_back(x + 0.5);
    h.bucket.push_back(n);
    if (n <= 0) continue;
    if (!any) h.min = x;
    any = true;
    h.max = x;
    h.num += n;
    h.sum += n * x;
    h.sum_squares += n * x * x;
  }
  return h;
}

Histogram expert_bias_histogram(const std::vector<float>& bias_E) {
  Histogram h;
  if (bias_E.empty()) return h;
  std::vector<double> v(bias_E.begin(), bias_E.end());
  std::sort(v.begin(), v.end());
  h.min = v.front();
  h.max = v.back();
  h.num = double(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h.sum += v[i];
    h.sum_squares += v[i] * v[i];
    if (i == 0 || v[i] != v[i - 1]) {
      if (i > 0) h.bucket_limit.back() = (v[i - 1] + v[i]) / 2;
      h.bucket_limit.push_back(v[i]);
      h.bucket.push_back(0);
    }
    h.bucket.back() += 1;
  }
  return h;
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepMetrics& m) {
  using M = StepMetrics;
  std::vector<std::pair<std::string, float>> out;
  for (const MetricField& f : kStepMetricFields) {
    if (!f.tb_tag || !metric_written(m, f)) continue;
    if (const auto* p = std::get_if<double M::*>(&f.member)) {
      if (std::isfinite(m.**p)) out.emplace_back(f.tb_tag, float(m.**p));
    } else if (const auto* p = std::get_if<int64_t M::*>(&f.member)) {
      out.emplace_back(f.tb_tag, float(m.**p));
    } else if (const auto* p = std::get_if<int M::*>(&f.member)) {
      out.emplace_back(f.tb_tag, float(m.**p));
    } else if (const auto* p = std::get_if<std::vector<double> M::*>(&f.member)) {
      add_per_layer(out, m, f, m.**p);
    } else if (const auto* p = std::get_if<DerivedPerLayer>(&f.member)) {
      add_per_layer(out, m, f, (*p)(m));
    }  // per-expert rows: histograms (TensorBoardWriter::write)
  }
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  namespace fs = std::filesystem;
  MOET_CHECK(!dir.empty(), "--tensorboard needs a directory");
  MOET_CHECK(!fs::exists(dir) || fs::is_directory(dir), "--tensorboard '", dir,
             "' exists and is not a directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  MOET_CHECK(!ec, "cannot create --tensorboard directory '", dir, "': ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double t = now_seconds();
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(t)) + "." + host + "." +
                            std::to_string(getpid()) + ".moet"))
              .string();
  file_ = std::fopen(path_.c_str(), "wbx");  // a new file: never another run's
  MOET_CHECK(file_, "cannot create TensorBoard event file '", path_, "': ", std::strerror(errno));
  append(tensorboard::file_version_event(t));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::append(const std::string& event) {
  const std::string rec = tensorboard::frame_record(event);
  MOET_CHECK(std::fwrite(rec.data(), 1, rec.size(), file_) == rec.size(),
             "cannot write TensorBoard event file '", path_, "': ", std::strerror(errno));
}

void TensorBoardWriter::mark_resume(int64_t step) {
  append(tensorboard::session_start_event(now_seconds(), step));
}

void TensorBoardWriter::write(const StepMetrics& m) {
  using M = StepMetrics;
  const double t = now_seconds();
  append(tensorboard::scalars_event(t, m.step, tensorboard_scalars(m)));
  for (const MetricField& f : kStepMetricFields) {
    if (!f.tb_tag || !metric_written(m, f)) continue;
    const std::vector<int64_t>& layers = metric_layers(m, f);
    auto histograms = [&](const auto& rows, auto histogram) {
      MOET_ASSERT_MSG(rows.size() <= layers.size(), f.key, " has more layers than their indices");
      for (size_t i = 0; i < rows.size(); ++i)
        append(
            tensorboard::histogram_event(t, m.step, layer_tag(f, layers[i]), histogram(rows[i])));
    };
    if (const auto* p = std::get_if<std::vector<std::vector<int64_t>> M::*>(&f.member))
      histograms(m.**p, expert_load_histogram);
    else if (const auto* p = std::get_if<std::vector<std::vector<float>> M::*>(&f.member))
      histograms(m.**p, expert_bias_histogram);
  }
}

void TensorBoardWriter::flush() {
  MOET_CHECK(std::fflush(file_) == 0, "cannot write TensorBoard event file '", path_,
             "': ", std::strerror(errno));
}

}  // namespace moet

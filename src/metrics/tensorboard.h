// TensorBoard event files written by moet itself: TFRecord framing (length, masked CRC-32C of
// the length, data, masked CRC-32C of the data) around hand-encoded protobuf `Event`s holding
// scalars and histograms; the tags a Megatron user knows (docs/metrics.md).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "metrics/step_metrics.h"

namespace moet {

// TensorFlow's HistogramProto: bucket i counts the values in (bucket_limit[i-1], bucket_limit[i]].
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

namespace tensorboard {

// CRC-32C masked as TFRecord stores it: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* bytes, size_t n);
// One TFRecord: u64 length | u32 masked CRC of those 8 bytes | data | u32 masked CRC of data,
// little-endian.
std::string frame_record(const std::string& data);
// Serialized Event{wall_time, file_version "brain.Event:2"}: an event file's first record.
std::string file_version_event(double wall_time);
// Serialized Event{wall_time, step, session_log{status START}}: TensorBoard drops the events of
// steps >= step read before it (the steps an interrupted run did after its checkpoint).
std::string session_start_event(double wall_time, int64_t step);
// Serialized Event{wall_time, step, summary{value{tag, simple_value}...}}.
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& values);
// Serialized Event{wall_time, step, summary{value{tag, histo}}}.
std::string histogram_event(double wall_time, int64_t step, const std::string& tag,
                            const Histogram& h);

}  // namespace tensorboard

// Per-expert load as a histogram over expert indices: each (token, expert) assignment is one
// sample of its expert's index, so bucket e (limit e + 0.5) holds expert e's tokens and num the
// layer's assignments.
Histogram expert_load_histogram(const std::vector<int64_t>& load_E);

// A layer's expert biases as the distribution of their values (each expert one sample): one
// bucket per distinct value, in increasing order, its limit halfway to the next value (the last
// one's the largest value), so bucket i holds the experts whose bias is the i-th smallest value
// and num is the number of experts.
Histogram expert_bias_histogram(const std::vector<float>& bias_E);

// The scalars of one step under their TensorBoard tags (kStepMetricFields' tb_tag, the table of
// docs/metrics.md), in the table's order, each the float32 of the JSONL field it mirrors; fields
// not measured this step are left out.
std::vector<std::pair<std::string, float>> tensorboard_scalars(const StepMetrics& m);

// One event file in a directory: events.out.tfevents.<seconds>.<host>.<pid>.moet.
class TensorBoardWriter {
 public:
  // Creates `dir` when missing; refuses (moet::Error) a path that exists and is not a
  // directory. Writes the file-version record.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // A resumed run: its first step is `step` (session_start_event).
  void mark_resume(int64_t step);
  // The step's scalars (with a balance loss per MoE layer), and with expert loads a load
  // histogram, a bias histogram and an imbalance scalar per layer (kStepMetricFields' tags).
  void write(const StepMetrics& m);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace moet

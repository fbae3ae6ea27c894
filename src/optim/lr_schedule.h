// Learning-rate schedules: linear warm-up, then cosine decay to min_lr (or constant).
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct LrSchedule {
  enum class Kind { Cosine, Constant };
  Kind kind = Kind::Cosine;
  double max_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup = 0;
  int64_t total = 1;
  // lr at 0-based step s (docs/model.md).
  double at(int64_t step) const;
};

LrSchedule::Kind parse_schedule_kind(const std::string& name);

}  // namespace moet

#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moet {

double LrSchedule::at(int64_t s) const {
  if (s < warmup) return max_lr * double(s + 1) / double(warmup);
  if (kind == Kind::Constant) return max_lr;
  double progress = double(s - warmup) / double(std::max<int64_t>(1, total - warmup));
  progress = std::min(progress, 1.0);
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

LrSchedule::Kind parse_schedule_kind(const std::string& name) {
  if (name == "cosine") return LrSchedule::Kind::Cosine;
  if (name == "constant") return LrSchedule::Kind::Constant;
  MOET_FAIL("unknown --schedule '", name, "' (use cosine or constant)");
}

}  // namespace moet

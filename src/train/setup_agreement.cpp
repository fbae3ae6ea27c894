#include "train/setup_agreement.h"

#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace moet {

SetupAgreement::SetupAgreement(Communicator* world) : world_(world) {}

void SetupAgreement::exchange(bool failed) {
  MOET_ASSERT(!done_);
  done_ = true;
  if (!world_ || world_->size() == 1) {
    refused_ = reports_ = failed;
    return;
  }
  // One slot per rank: 1 where that rank's setup failed.
  std::vector<double> failures(size_t(world_->size()), 0.0);
  failures[size_t(world_->rank())] = failed ? 1.0 : 0.0;
  world_->allreduce_sum(failures.data(), int64_t(failures.size()));
  int first = -1;
  for (size_t r = 0; r < failures.size() && first < 0; ++r)
    if (failures[r] > 0) first = int(r);
  refused_ = first >= 0;
  reports_ = first == world_->rank();
}

void SetupAgreement::agree() {
  exchange(false);
  MOET_CHECK(!refused_, "another rank refused the run's setup");
}

void SetupAgreement::refuse() { exchange(true); }

}  // namespace moet

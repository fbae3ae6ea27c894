// Memory: what a training process needs (parameters, gradients, optimizer state, low-precision
// weight operands, activations) against what it holds (resident set size, from /proc).
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct MemoryNeed {
  int64_t params = 0, grads = 0, optimizer = 0, weight_operands = 0, activations = 0;
  int64_t checkpoint = 0;  // the copy of the state an asynchronous checkpoint writes from
  int64_t total() const {
    return params + grads + optimizer + weight_operands + activations + checkpoint;
  }
  // "parameters 238 MB, gradients 238, optimizer 476, weight operands 119, activations 95:
  // 1166 MB"
  std::string describe() const;
};

// The machine's physical memory (sysconf), bytes; 0 where unknown.
int64_t machine_memory_bytes();

// Refuses (moet::Error, one line in GB) a model that cannot fit before any of it is allocated:
// training keeps at least 16 bytes of every parameter (fp32 weights, gradients, two AdamW moments),
// so `parameters` / `ranks` of them must fit in this machine's memory whatever the layout. The
// line names the config and points to moet plan / moet simulate and a smaller config.
void check_model_fits(const std::string& config, int64_t parameters, int64_t ranks);

// The process's resident set size now, and its peak so far (VmRSS, VmHWM); 0 where unknown.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();

}  // namespace moet

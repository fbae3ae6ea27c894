// Memory: what a training process needs (parameters, gradients, optimizer state, low-precision
// weight operands, activations) against what it holds (resident set size, from /proc).
#pragma once
#include <cstdint>
#include <string>

namespace moet {

struct MemoryNeed {
  int64_t params = 0, grads = 0, optimizer = 0, weight_operands = 0, activations = 0;
  int64_t checkpoint = 0;  // the copy of the state an asynchronous checkpoint writes from
  // What the optimizer state would take with fp32 moments, when it is stored smaller (the
  // precision-aware optimizer's bf16 moments); 0 otherwise.
  int64_t optimizer_fp32 = 0;
  int64_t total() const {
    return params + grads + optimizer + weight_operands + activations + checkpoint;
  }
  // "parameters 238 MB, gradients 238, optimizer 476, weight operands 119, activations 95:
  // 1166 MB"; with bf16 moments "optimizer 238 (bf16 moments; 476 in fp32)"
  std::string describe() const;
};

// The machine's physical memory (sysconf), bytes; 0 where unknown.
int64_t machine_memory_bytes();

// Refuses (moet::Error, one line in GB) a model that cannot fit before any of it is allocated:
// training keeps at least 16 bytes of every parameter (fp32 weights, gradients, two AdamW moments;
// `bytes_per_param` 12 or 14 with moments in bf16), so `parameters` / `ranks` of them must fit in
// this machine's memory whatever the layout. The line names the config and points to moet plan /
// moet simulate and a smaller config.
void check_model_fits(const std::string& config, int64_t parameters, int64_t ranks,
                      int64_t bytes_per_param = 16);

// The process's resident set size now, and its peak so far (VmRSS, VmHWM); 0 where unknown.
int64_t current_rss_bytes();
int64_t peak_rss_bytes();

}  // namespace moet

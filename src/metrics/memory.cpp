#include "metrics/memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace moet {
namespace {

// A "Name:   1234 kB" line of /proc/self/status, in bytes.
int64_t status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      long long v = 0;
      if (std::sscanf(line + n + 1, "%lld", &v) == 1) kb = v;
      break;
    }
  std::fclose(f);
  return kb * 1024;
}

std::string mb(int64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.0f", double(b) / 1048576.0);
  return s;
}

}  // namespace

int64_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * int64_t(page) : 0;
}

void check_model_fits(const std::string& config, int64_t parameters, int64_t ranks,
                      int64_t bytes_per_param) {
  const int64_t have = machine_memory_bytes();
  const double need =
      double(bytes_per_param) * double(parameters) / double(std::max<int64_t>(ranks, 1));
  if (have <= 0 || need <= double(have)) return;
  char line[640];
  std::snprintf(line, sizeof line,
                "%s has %.1fB parameters: training keeps at least %lld bytes of each (fp32 "
                "weights, gradients and two AdamW moments), %.0f GB%s, and this machine has %.0f "
                "GB; plan a cluster run with moet plan --model %s (or moet simulate), or train a "
                "smaller config (configs/small.json)",
                config.c_str(), double(parameters) / 1e9, (long long)bytes_per_param, need / 1e9,
                ranks > 1 ? " per rank even with every weight sharded" : "", double(have) / 1e9,
                config.c_str());
  throw Error(line);
}

int64_t current_rss_bytes() { return status_kb("VmRSS"); }
int64_t peak_rss_bytes() { return status_kb("VmHWM"); }

std::string MemoryNeed::describe() const {
  const std::string smaller =
      optimizer_fp32 > optimizer ? " (bf16 moments; " + mb(optimizer_fp32) + " in fp32)" : "";
  return "parameters " + mb(params) + " MB, gradients " + mb(grads) + ", optimizer " +
         mb(optimizer) + smaller + ", weight operands " + mb(weight_operands) + ", activations " +
         mb(activations) + (checkpoint ? ", checkpoint copy " + mb(checkpoint) : std::string()) +
         ": " + mb(total()) + " MB";
}

}  // namespace moet

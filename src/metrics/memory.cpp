#include "metrics/memory.h"

#include <cstdio>
#include <cstring>

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

int64_t current_rss_bytes() { return status_kb("VmRSS"); }
int64_t peak_rss_bytes() { return status_kb("VmHWM"); }

std::string MemoryNeed::describe() const {
  return "parameters " + mb(params) + " MB, gradients " + mb(grads) + ", optimizer " +
         mb(optimizer) + ", weight operands " + mb(weight_operands) + ", activations " +
         mb(activations) + (checkpoint ? ", checkpoint copy " + mb(checkpoint) : std::string()) +
         ": " + mb(total()) + " MB";
}

}  // namespace moet

#include "core/crc32c.h"

#include <array>
#include <cstdio>
#include <cstring>

namespace moet {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = make_table();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const void* bytes, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

bool has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* bytes, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  uint32_t c = ~crc;
  while (n--) c = kTable[(c ^ *p++) & 0xFFu] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* bytes, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (has_sse42()) return crc32c_sse42(bytes, n, crc);
#endif
  return crc32c_portable(bytes, n, crc);
}

std::string crc32c_string(uint32_t crc) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "crc32c:%08x", crc);
  return buf;
}

}  // namespace moet

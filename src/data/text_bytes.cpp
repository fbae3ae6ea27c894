#include "data/text_bytes.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>
#include <vector>

#include "core/error.h"

namespace moet {

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 when ill-formed; `bad` then gets the
// length of its maximal subpart (at least 1), the bytes one U+FFFD replaces.
size_t utf8_sequence(std::string_view s, size_t i, size_t& bad) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = at(i);
  bad = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte (Table 3-7 of the standard)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return 0;
    const uint8_t b = at(i + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    bad = k + 1;
  }
  return need;
}

struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points < 324 cover the whole alphabet
  ByteMap() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = self ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    // Eight ASCII bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const size_t n = utf8_sequence(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

std::string utf8_replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence(s, i, bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string nfc(std::string_view s) {
  // Every code point below U+0300 is NFC and none combines with what precedes it.
  bool simple = true;
  for (char c : s) simple &= static_cast<uint8_t>(c) < 0xCC;
  if (simple) return std::string(s);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = unorm2_getNFCInstance(&err);
  MOET_CHECK(U_SUCCESS(err), "ICU has no NFC normalizer: ", u_errorName(err));
  std::vector<UChar> u16(s.size() + 1), out16;
  int32_t len16 = 0;
  u_strFromUTF8(u16.data(), static_cast<int32_t>(u16.size()), &len16, s.data(),
                static_cast<int32_t>(s.size()), &err);
  MOET_CHECK(U_SUCCESS(err), "UTF-8 to UTF-16 failed: ", u_errorName(err));
  out16.resize(static_cast<size_t>(len16) * 3 + 16);  // NFC grows text at most 3x
  const int32_t n16 = unorm2_normalize(n, u16.data(), len16, out16.data(),
                                       static_cast<int32_t>(out16.size()), &err);
  MOET_CHECK(U_SUCCESS(err), "NFC failed: ", u_errorName(err));
  std::string out(static_cast<size_t>(n16) * 3 + 4, '\0');
  int32_t n8 = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &n8, out16.data(), n16, &err);
  MOET_CHECK(U_SUCCESS(err), "UTF-16 to UTF-8 failed: ", u_errorName(err));
  out.resize(static_cast<size_t>(n8));
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t byte_to_unicode(uint8_t b) { return byte_map().to_cp[b]; }

int byte_from_unicode(uint32_t cp) {
  return cp < byte_map().from_cp.size() ? byte_map().from_cp[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_unicode(static_cast<uint8_t>(c)));
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  out.clear();
  size_t i = 0, bad = 0;
  while (i < text.size()) {
    const size_t n = utf8_sequence(text, i, bad);
    if (n == 0 || n > 2) return false;  // the alphabet lies below U+0800
    uint32_t cp = static_cast<uint8_t>(text[i]);
    if (n == 2) cp = ((cp & 0x1F) << 6) | (static_cast<uint8_t>(text[i + 1]) & 0x3F);
    const int b = byte_from_unicode(cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += n;
  }
  return true;
}

}  // namespace moet

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every tensor piece in
// a checkpoint: the SSE4.2 crc32 instruction where the CPU has it (picked at run time), a
// table otherwise; both give the same value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moet {

// CRC-32C of bytes[0..n), continuing from `crc` (0 for a fresh checksum).
uint32_t crc32c(const void* bytes, size_t n, uint32_t crc = 0);
// The table implementation (tests compare the two).
uint32_t crc32c_portable(const void* bytes, size_t n, uint32_t crc = 0);
// "crc32c:" followed by eight lower-case hex digits, as checkpoint metadata records it.
std::string crc32c_string(uint32_t crc);

}  // namespace moet

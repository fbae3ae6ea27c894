// Counter-based random numbers: every value is a pure function of (seed, stream, index), so
// results do not depend on call order, thread count or how work is split over processes.
// The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): the 64-bit seed is the key, the 128-bit counter is (index, stream).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace moet {

// One Philox4x32 block with 10 rounds: counter words c[0..3], key words k[0..1].
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    const uint64_t p0 = uint64_t{kMul0} * c[0];
    const uint64_t p1 = uint64_t{kMul1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

// Blocks first .. first + n - 1 of the counter-based stream (counter words the block index's
// low and high halves, then the stream's; key the seed's halves, as CounterRng::block), their 4
// words each in out[4k .. 4k + 3]: the same numbers as philox4x32_10 block by block, computed
// 16 blocks at a time across lanes so the loop vectorises.
inline void philox4x32_10_blocks(uint64_t seed, uint64_t stream, uint64_t first, int64_t n,
                                 uint32_t* out) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  constexpr int64_t kLanes = 16;
  alignas(64) uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int64_t b0 = 0; b0 < n; b0 += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const uint64_t index = first + uint64_t(b0 + j);
      c0[j] = static_cast<uint32_t>(index), c1[j] = static_cast<uint32_t>(index >> 32);
      c2[j] = static_cast<uint32_t>(stream), c3[j] = static_cast<uint32_t>(stream >> 32);
    }
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) k0 += kWeyl0, k1 += kWeyl1;
#pragma omp simd
      for (int64_t j = 0; j < kLanes; ++j) {
        const uint64_t p0 = uint64_t{kMul0} * c0[j], p1 = uint64_t{kMul1} * c2[j];
        const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0,
                       n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
        c1[j] = static_cast<uint32_t>(p1), c3[j] = static_cast<uint32_t>(p0);
        c0[j] = n0, c2[j] = n2;
      }
    }
    const int64_t w = std::min(kLanes, n - b0);
    for (int64_t j = 0; j < w; ++j) {
      uint32_t* o = out + 4 * (b0 + j);
      o[0] = c0[j], o[1] = c1[j], o[2] = c2[j], o[3] = c3[j];
    }
  }
}

// splitmix64's finaliser: a bijective 64-bit mix.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A 64-bit stream id from several parts (e.g. {purpose tag, step, micro-batch, sequence}).
// Different part lists give different ids except with probability ~2^-64.
constexpr uint64_t stream_id(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6A09E667F3BCC909ull;
  for (uint64_t p : parts) h = mix64(h ^ mix64(p + 0x9E3779B97F4A7C15ull));
  return h;
}

// The random values of one (seed, stream): value i is a function of i alone.
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // The four 32-bit words of block `index`.
  std::array<uint32_t, 4> block(uint64_t index) const {
    return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                          static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                         {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  }
  uint64_t u64(uint64_t index) const {
    const auto b = block(index);
    return (uint64_t{b[1]} << 32) | b[0];
  }
  uint32_t u32(uint64_t index) const { return block(index)[0]; }

  // Uniform integer in [0, n), n > 0, by Lemire's multiply-high on 64 random bits; the bias
  // is at most n / 2^64.
  uint64_t below(uint64_t index, uint64_t n) const {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(u64(index)) * n) >> 64);
  }
  // Uniform double in [0, 1) with 53 random bits.
  double uniform(uint64_t index) const { return static_cast<double>(u64(index) >> 11) * 0x1p-53; }
  // Standard normal by Box-Muller from the two 64-bit halves of block `index`.
  double normal(uint64_t index) const {
    const auto b = block(index);
    const uint64_t a = (uint64_t{b[1]} << 32) | b[0];
    const uint64_t c = (uint64_t{b[3]} << 32) | b[2];
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1p-53;  // (0, 1]
    const double u2 = static_cast<double>(c >> 11) * 0x1p-53;          // [0, 1)
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
  }

  uint64_t seed() const { return seed_; }
  uint64_t stream() const { return stream_; }

 private:
  uint64_t seed_;
  uint64_t stream_;
};

}  // namespace moet

// XXH32 (Yann Collet's xxHash, 32-bit, seed given): the checksum of every Nova format
// (src/common/checksum.ts). Here rather than through a hashing package so that a checksum
// is one native call returning a number, with no result buffer to allocate
// (doc/decisions/native-checksum.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace nova {

inline uint32_t Xxh32(const uint8_t* p, size_t len, uint32_t seed = 0) {
  constexpr uint32_t P1 = 0x9E3779B1u, P2 = 0x85EBCA77u, P3 = 0xC2B2AE3Du, P4 = 0x27D4EB2Fu, P5 = 0x165667B1u;
  auto rotl = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  // Little-endian reads, as the format defines; memcpy lets the compiler emit one load.
  auto read32 = [](const uint8_t* q) {
    uint32_t v;
    std::memcpy(&v, q, 4);
    return v;
  };
  auto round = [&](uint32_t acc, uint32_t input) { return rotl(acc + input * P2, 13) * P1; };
  const uint8_t* const end = p + len;
  uint32_t h;
  if (len >= 16) {
    uint32_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const uint8_t* const limit = end - 16;
    do {
      v1 = round(v1, read32(p));
      v2 = round(v2, read32(p + 4));
      v3 = round(v3, read32(p + 8));
      v4 = round(v4, read32(p + 12));
      p += 16;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
  } else {
    h = seed + P5;
  }
  h += static_cast<uint32_t>(len);
  for (; p + 4 <= end; p += 4) h = rotl(h + read32(p) * P3, 17) * P4;
  for (; p < end; ++p) h = rotl(h + *p * P5, 11) * P1;
  h ^= h >> 15;
  h *= P2;
  h ^= h >> 13;
  h *= P3;
  h ^= h >> 16;
  return h;
}

}  // namespace nova

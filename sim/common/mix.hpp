#pragma once
// splitmix64's finaliser: a bijective 64-bit mix (distinct inputs give distinct outputs), the one
// fixed, portable hash behind the project's seeded keys and streams.
#include <cstdint>

namespace fp8sim {

constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace fp8sim

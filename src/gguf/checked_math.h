// Overflow-checked arithmetic for sizes read from untrusted files. A corrupt count
// multiplied by an element size must fail the bounds check, not wrap around and pass it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve {

// Each returns false (and leaves *out unspecified) when the exact result does not fit.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Rounds `x` up to a multiple of `align` (a nonzero power of two); false on overflow.
inline bool checked_align_up(uint64_t x, uint64_t align, uint64_t* out) {
  if (!checked_add(x, align - 1, out)) return false;
  *out &= ~(align - 1);
  return true;
}

inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace kvserve

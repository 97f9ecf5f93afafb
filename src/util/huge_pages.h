// Buffers that are streamed over and over (the packed weights, the KV arena, the bandwidth
// probe's buffer) live on transparent huge pages where the OS allows: with 4 KiB pages their
// reads miss the TLB every few KiB, and faulting them in costs ~30x longer (THP is often
// "madvise" only, so it has to be asked for). These helpers give such a buffer its alignment and
// its advice; the allocation itself stays with the caller (aligned new, aligned_alloc).
#pragma once

#include <cstddef>

namespace kvserve {

constexpr size_t kHugePageBytes = size_t(2) << 20;

// The alignment for a buffer of `bytes`: a huge page from kHugePageBytes up, else `small_align`.
inline size_t huge_page_alignment(size_t bytes, size_t small_align) {
  return bytes >= kHugePageBytes ? kHugePageBytes : small_align;
}

// bytes rounded up to a multiple of align.
inline size_t round_up_to(size_t bytes, size_t align) { return (bytes + align - 1) / align * align; }

// Asks for huge pages on [p, p + bytes) when the buffer was given a huge-page alignment; a hint:
// failure (or no THP) only costs time.
void advise_huge_pages(void* p, size_t bytes, size_t align);

}  // namespace kvserve

// Bounds-checked little-endian cursor over the mmapped bytes of a GGUF file.
// Every read first checks that its bytes exist, so no corrupt length can move the
// cursor past the end; a failed read leaves the cursor where it was.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kvserve {

// GGUF is little-endian and the reader copies fields with memcpy; the build targets x86-64.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

class GgufByteReader {
 public:
  GgufByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (sizeof(T) > remaining()) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // Points *out at the next n bytes (inside the map) and skips them.
  bool read_bytes(uint64_t n, const uint8_t** out) {
    if (n > remaining()) return false;
    *out = data_ + pos_;
    pos_ += size_t(n);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kvserve

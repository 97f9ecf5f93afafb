// Small pieces shared by the micro-benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "gguf/types.h"
#include "util/huge_pages.h"
#include "util/thread_pool.h"

namespace kvserve {

// The integer value of environment variable `name`, or `fallback` when it is unset.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// cols rounded up to whole blocks of t (the k-quants' super-blocks are 256 elements).
inline int64_t whole_blocks(GgmlType t, int64_t cols) {
  const int64_t b = ggml_block_size(t);
  return (cols + b - 1) / b * b;
}

// The benchmarks' one thread pool. KVS_BENCH_THREADS=N fixes its size (default: all cores); 1
// gives per-core figures that a busy machine disturbs less.
inline ThreadPool& bench_pool() {
  static ThreadPool p(env_int("KVS_BENCH_THREADS", 0));
  return p;
}

// A buffer of at least `bytes` on huge pages, as the engine keeps its packed weights and KV arena
// (util/huge_pages.h); data is null when the allocation failed.
class HugeBuffer {
 public:
  explicit HugeBuffer(size_t bytes)
      : bytes_(round_up_to(bytes, kHugePageBytes)),
        data_(static_cast<uint8_t*>(::operator new(bytes_, std::align_val_t(kHugePageBytes), std::nothrow))) {
    if (data_ != nullptr) advise_huge_pages(data_, bytes_, kHugePageBytes);
  }
  ~HugeBuffer() {
    if (data_ != nullptr) ::operator delete(data_, std::align_val_t(kHugePageBytes));
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  uint8_t* data_;
};

}  // namespace kvserve

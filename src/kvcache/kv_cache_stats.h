// A snapshot of KV cache occupancy, for metrics and logs.
#pragma once

#include <cstdint>

namespace kvserve {

struct KvCacheStats {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_used = 0;  // ref_count > 0
  int32_t num_blocks_free = 0;  // in the free list
  int64_t num_seqs = 0;
  int64_t num_tokens = 0;  // tokens held, summed over sequences
  int block_size = 0;

  // Fraction of blocks in use, 0 for an empty pool.
  double usage() const { return num_blocks_total > 0 ? double(num_blocks_used) / num_blocks_total : 0.0; }
};

}  // namespace kvserve

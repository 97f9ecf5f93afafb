#include "engine/kv_arena_size.h"

#include <algorithm>

#include "util/units.h"

namespace kvserve {

Expected<KvArenaSize> size_kv_arena(const KvLayout& layout, int64_t ctx, const std::string& kv_memory,
                                    uint64_t available_bytes) {
  KvArenaSize out;
  out.ctx = ctx;
  const uint64_t block_bytes = layout.block_bytes();
  if (!kv_memory.empty()) {
    KVS_ASSIGN_OR_RETURN(out.num_blocks, num_blocks_for_memory(layout, kv_memory));
    // A sequence can never hold more than the arena, so the budget caps the context. This also
    // guarantees the scheduler's progress: the longest sequence fits in the whole pool.
    out.ctx = std::min<int64_t>(ctx, int64_t(out.num_blocks) * layout.block_size);
    if (out.ctx <= 0)
      return out_of_memory("--kv-memory " + kv_memory + " holds no KV block of " +
                           std::to_string(block_bytes) + " bytes");
    const uint64_t bytes = uint64_t(out.num_blocks) * block_bytes;
    if (bytes > available_bytes)
      return out_of_memory("--kv-memory " + kv_memory + " (" + format_bytes(bytes) +
                           " of KV blocks) is more than the " + format_bytes(available_bytes) +
                           " of memory available: choose a smaller budget");
    return out;
  }
  KVS_ASSIGN_OR_RETURN(out.num_blocks, num_blocks_for_tokens(layout, ctx));
  const uint64_t bytes = uint64_t(out.num_blocks) * block_bytes;
  if (bytes > available_bytes) {
    const int64_t fits = int64_t(available_bytes / block_bytes) * layout.block_size;
    if (fits == 0)
      return out_of_memory("the KV cache needs " + format_bytes(bytes) + " but " +
                           format_bytes(available_bytes) +
                           " of memory is available, less than one KV block of " + format_bytes(block_bytes));
    return out_of_memory("the KV cache for a context of " + std::to_string(ctx) + " tokens needs " +
                         format_bytes(bytes) + " (" + std::to_string(layout.bytes_per_token()) +
                         " bytes per token, K " + kv_dtype_name(layout.k_dtype) + ", V " +
                         kv_dtype_name(layout.v_dtype) + ") but " + format_bytes(available_bytes) +
                         " of memory is available: set --ctx to at most " + std::to_string(fits) +
                         ", a smaller KV type (--kv-type q8_0 takes about a quarter of f32's bytes) or a "
                         "--kv-memory budget");
  }
  return out;
}

}  // namespace kvserve

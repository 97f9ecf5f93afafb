// How many KV blocks an engine allocates for its context, shared by the server's engine and the
// one-shot generator. The arena is zero-filled up front (kvcache/kv_storage.cpp), so one larger
// than the memory left would end in the OOM killer mid-start rather than in an error: it is
// refused here with what to change.
#pragma once

#include <cstdint>
#include <string>

#include "kvcache/kv_layout.h"
#include "util/status.h"

namespace kvserve {

struct KvArenaSize {
  int32_t num_blocks = 0;
  int64_t ctx = 0;  // the context the engine then runs with (a budget may cap the model's)
};

// kv_memory empty: one sequence of ctx tokens (concurrent ones share it and are preempted when
// it runs out). Otherwise the budget's blocks, capping ctx to what they hold. Either way an arena
// of more than `available_bytes` is refused, naming what to change.
Expected<KvArenaSize> size_kv_arena(const KvLayout& layout, int64_t ctx, const std::string& kv_memory,
                                    uint64_t available_bytes);

}  // namespace kvserve

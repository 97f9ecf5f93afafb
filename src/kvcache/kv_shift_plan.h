// What a context shift (KvCacheManager::shift) asks of the KV memory. The manager only moves
// block ids; the engine thread, the only one that touches KV memory, then carries out the plan
// (model/kv_shift.h): first every copy, in order, then the key re-rotation.
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve {

// Copy num_slots token slots (every layer, K and V) from src_block slots [src_slot, +num_slots)
// to dst_block slots [dst_slot, +num_slots).
struct KvSlotCopy {
  int32_t src_block = -1;
  int32_t dst_block = -1;
  int32_t src_slot = 0;
  int32_t dst_slot = 0;
  int32_t num_slots = 0;
};

// After the shift, the sequence's positions [rotate_begin, rotate_end) hold keys that were
// rotated for position p - delta (delta = -discarded tokens < 0): rotating each by `delta`
// positions gives the keys of its new position. Values carry no position and stay as they are.
struct KvShiftPlan {
  int64_t keep = 0;     // sink tokens kept at the start
  int64_t discard = 0;  // tokens dropped right after them (a multiple of the block size)
  std::vector<KvSlotCopy> copies;
  int64_t rotate_begin = 0;
  int64_t rotate_end = 0;
  int64_t delta = 0;
};

}  // namespace kvserve

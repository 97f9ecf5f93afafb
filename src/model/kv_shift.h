// Carries out a context shift (kvcache/kv_shift_plan.h) on the KV memory: the slot copies the
// cache manager planned, then the re-rotation of the moved keys for their new positions.
//
// RoPE rotates each (pair of) key dimension(s) by an angle linear in the position,
// theta_i(p) = p * w_i, so a key stored for position p becomes the key for position p + delta by
// one more rotation of delta * w_i: R(delta) R(p) k = R(p + delta) k. The angles are the same
// for every moved position, computed once. Values carry no position and are left alone.
// Quantized keys are dequantized, rotated and quantized again (one extra rounding per shift).
#pragma once

#include <cstdint>
#include <span>

#include "kvcache/kv_shift_plan.h"
#include "kvcache/kv_storage.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace kvserve {

// Copies c.num_slots token slots of every layer's K and V planes.
void copy_kv_slots(KvStorage& kv, const KvSlotCopy& c);

// Rotates the stored keys of positions [begin, end) of the sequence whose blocks are `table`
// by `delta` positions with the model's RoPE (base, linear scale, Llama-3 factors, pair layout).
// Work is split over layers on `pool` (may be null).
void rerotate_keys(KvStorage& kv, const Model& model, std::span<const int32_t> table, int64_t begin, int64_t end,
                   int64_t delta, ThreadPool* pool);

// Every copy of the plan in order, then the re-rotation; `table` is the sequence's table after
// the shift (KvCacheManager::block_table).
void apply_kv_shift(KvStorage& kv, const Model& model, const KvShiftPlan& plan, std::span<const int32_t> table,
                    ThreadPool* pool);

}  // namespace kvserve

// The shape of the KV cache: element type, model dimensions that size a token's K/V, and the
// block size. Everything that turns "a block id and a layer" into bytes goes through here, so
// the model's attention and KvStorage agree on one layout.
//
// Byte layout of one block (block_bytes() bytes), planes in this order:
//   for layer in [0, num_layers):
//     K plane: [block_size][num_kv_heads][head_dim] elements of dtype   (plane_bytes() bytes)
//     V plane: [block_size][num_kv_heads][head_dim] elements of dtype   (plane_bytes() bytes)
// Within a plane, token slot s of head h starts at (s * num_kv_heads + h) * head_row_bytes().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace kvserve {

// Element type of cached K/V. Float types only for now; quantized types (Q8_0, Q4_0) will
// store a head row as groups with scales, which is why sizes are asked per row
// (kv_dtype_row_bytes) rather than multiplied out from a per-element size everywhere.
enum class KvDType : uint8_t { F32, F16 };

const char* kv_dtype_name(KvDType dtype);  // "f32", "f16"
// Accepts the names above, case-insensitive; invalid_argument otherwise.
Expected<KvDType> parse_kv_dtype(const std::string& text);
// Bytes per element (float types).
size_t kv_dtype_bytes(KvDType dtype);
// Bytes occupied by num_elements contiguous elements (one head row of head_dim elements).
size_t kv_dtype_row_bytes(KvDType dtype, int64_t num_elements);

// Which half of a layer's entry in a block.
enum class KvPart : uint8_t { kKey = 0, kValue = 1 };

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  KvDType dtype = KvDType::F32;

  // All dimensions positive and block_bytes() representable; names the bad field otherwise.
  Status validate() const;

  // Bytes of one head's K (or V) for one token: head_dim elements.
  size_t head_row_bytes() const { return kv_dtype_row_bytes(dtype, head_dim); }
  // Bytes of one token's K (or V) in one layer: [num_kv_heads][head_dim].
  size_t slot_bytes() const { return size_t(num_kv_heads) * head_row_bytes(); }
  // Bytes of one K (or V) plane of one layer in one block: [block_size][num_kv_heads][head_dim].
  size_t plane_bytes() const { return size_t(block_size) * slot_bytes(); }
  // K and V of every layer for one token: 2 * layers * kv_heads * head_dim * elem bytes.
  size_t bytes_per_token() const { return 2 * size_t(num_layers) * slot_bytes(); }
  // One whole block: block_size tokens' worth of bytes_per_token().
  size_t block_bytes() const { return 2 * size_t(num_layers) * plane_bytes(); }
  // Offset of the (layer, part) plane from the start of its block. The single place that
  // defines the in-block layout above.
  size_t plane_offset(int layer, KvPart part) const {
    return (2 * size_t(layer) + size_t(part)) * plane_bytes();
  }
};

// Blocks that fit in a byte budget (floor). invalid_argument when not even one block fits or
// the layout is invalid; the count is capped at INT32_MAX (block ids are int32).
Expected<int32_t> num_blocks_for_bytes(const KvLayout& layout, uint64_t budget_bytes);
// Same, from a flag value: "512MiB", "2GiB" or a fraction of physical RAM "0.6"
// (util/units.h parse_memory_budget).
Expected<int32_t> num_blocks_for_memory(const KvLayout& layout, const std::string& budget_text);
// Enough blocks to hold num_tokens tokens of one sequence: ceil(num_tokens / block_size),
// at least 1.
Expected<int32_t> num_blocks_for_tokens(const KvLayout& layout, int64_t num_tokens);

}  // namespace kvserve

// The shape of the KV cache: element types of K and of V, model dimensions that size a token's
// K/V, and the block size. Everything that turns "a block id and a layer" into bytes goes
// through here, so the model's attention and KvStorage agree on one layout.
//
// A block holds block_bytes() bytes: for each layer, one K plane and one V plane,
//     K plane: [block_size][num_kv_heads] head rows of k_dtype   (plane_bytes(kKey) bytes)
//     V plane: [block_size][num_kv_heads] head rows of v_dtype   (plane_bytes(kValue) bytes)
// the V plane right after the K plane (layer_block_bytes() = both). Where the (block, layer)
// pairs lie in the arena is KvStorage's business (kv_storage.h: layer-major).
// Within a plane, token slot s of head h starts at (s * num_kv_heads + h) * head_row_bytes(part).
// Rows are packed with no padding, so a row need not be aligned (kernels load unaligned).
//
// A head row holds head_dim values. Float types store them as plain elements. The quantized
// types cut the row into groups along the head dimension: groups of 32 values, the last group
// of r = head_dim % 32 values when head_dim is not a multiple of 32 (so head_dim 8 is one group
// of 8; head_dim 80 is 32 + 32 + 16). Each group is stored as its f16 scale d, then its values:
//   q8_0: [d: f16][g int8 q]                     value = d * q
//   q4_0: [d: f16][ceil(g/2) bytes of nibbles]   value = d * (nibble - 8); byte j holds value j
//         in its low nibble and value j + ceil(g/2) in its high nibble (an odd g leaves the last
//         high nibble 8, i.e. zero). A full group of 32 is exactly the GGUF block_q4_0 (and q8_0
//         the GGUF block_q8_0), with the same rounding.
// Tiled (KvLayout::tiled, q8_0 or q4_0 K and V only): each plane holds the same bytes arranged in tiles of
// 16 slots, [block_size / 16][num_kv_heads] tile-heads of 16 transposed rows, for the AVX-512
// attention kernel (kernels/kv_tiles.h has the byte order); rows are then read and written only
// through kernels/kv_tiles.h, never at the offsets above.
// Row bytes (the exact formula kv_dtype_row_bytes implements; n = head_dim, G = ceil(n / 32),
// F = floor(n / 32), r = n - 32 F):
//   f32: 4 n     f16, bf16: 2 n
//   q8_0: 2 G + n                          (n = 64: 68 bytes; n = 8: 10 bytes)
//   q4_0: 2 G + 16 F + ceil(r / 2)         (n = 64: 36 bytes; n = 8: 6 bytes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace kvserve {

// Element type of cached K or V.
enum class KvDType : uint8_t { F32, F16, BF16, Q8_0, Q4_0 };

// Every KvDType, in declaration order (for listings and tests).
inline constexpr KvDType kAllKvDTypes[] = {KvDType::F32, KvDType::F16, KvDType::BF16, KvDType::Q8_0,
                                           KvDType::Q4_0};
// Values per quantization group of the quantized types (the last group of a row may be shorter).
inline constexpr int kKvQuantGroup = 32;

const char* kv_dtype_name(KvDType dtype);  // "f32", "f16", "bf16", "q8_0", "q4_0"
// Accepts the names above, case-insensitive; invalid_argument otherwise.
Expected<KvDType> parse_kv_dtype(const std::string& text);
bool kv_dtype_is_quantized(KvDType dtype);  // q8_0, q4_0
// Bytes per element of the float types; for the quantized types the bytes of a full 32-value
// group divided by 32 is not an integer, so this asserts on them: use kv_dtype_row_bytes.
size_t kv_dtype_bytes(KvDType dtype);
// Exact bytes of num_elements values of one head row, scales included (formula above).
size_t kv_dtype_row_bytes(KvDType dtype, int64_t num_elements);

// Which half of a layer's entry in a block.
enum class KvPart : uint8_t { kKey = 0, kValue = 1 };

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  KvDType k_dtype = KvDType::F32;
  KvDType v_dtype = KvDType::F32;
  bool tiled = false;  // planes in the tiled layout (above); needs can_tile()

  // Sets K and V to the same type.
  void set_dtype(KvDType dtype) { k_dtype = v_dtype = dtype; }
  KvDType dtype(KvPart part) const { return part == KvPart::kKey ? k_dtype : v_dtype; }

  // Whether the tiled layout applies: q8_0 or q4_0 K and V, head_dim % 32 == 0, block_size % 16 == 0 (the
  // conditions of kernels/kv_tiles.h's kv_tiles_supported).
  bool can_tile() const;

  // All dimensions positive, block_bytes() representable, tiled only where can_tile(); names the
  // bad field otherwise.
  Status validate() const;

  // "k=q8_0,v=q4_0,bs=16" (",tiled2" appended for the tiled layout, 2 its byte order's version,
  // kernels/kv_tiles.h): what makes two caches' block contents interchangeable beyond the
  // model itself (the prefix cache hashes it into its namespace).
  std::string type_signature() const;

  // Bytes of one head's K (or V) for one token: head_dim values (scales included).
  size_t head_row_bytes(KvPart part) const { return kv_dtype_row_bytes(dtype(part), head_dim); }
  // Bytes of one token's K (or V) in one layer: [num_kv_heads] head rows.
  size_t slot_bytes(KvPart part) const { return size_t(num_kv_heads) * head_row_bytes(part); }
  // Bytes of one K (or V) plane of one layer in one block: [block_size][num_kv_heads] head rows.
  size_t plane_bytes(KvPart part) const { return size_t(block_size) * slot_bytes(part); }
  // K and V of every layer for one token:
  //   layers * kv_heads * (row_bytes(k_dtype, head_dim) + row_bytes(v_dtype, head_dim)),
  // i.e. 2 * layers * kv_heads * head_dim * elem bytes for a float type used for both.
  size_t bytes_per_token() const { return size_t(num_layers) * (slot_bytes(KvPart::kKey) + slot_bytes(KvPart::kValue)); }
  // One whole block: exactly block_size * bytes_per_token() (no padding).
  size_t block_bytes() const { return size_t(block_size) * bytes_per_token(); }
  // One block's K and V planes of one layer (adjacent, K first).
  size_t layer_block_bytes() const { return plane_bytes(KvPart::kKey) + plane_bytes(KvPart::kValue); }
  // Offset of the `part` plane from the start of a (block, layer) pair's K plane.
  size_t part_offset(KvPart part) const { return part == KvPart::kValue ? plane_bytes(KvPart::kKey) : 0; }
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

#include "kvcache/kv_layout.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "util/units.h"

namespace kvserve {

const char* kv_dtype_name(KvDType dtype) {
  switch (dtype) {
    case KvDType::F32:
      return "f32";
    case KvDType::F16:
      return "f16";
  }
  return "unknown";
}

Expected<KvDType> parse_kv_dtype(const std::string& text) {
  std::string lower;
  for (char c : text) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (KvDType d : {KvDType::F32, KvDType::F16})
    if (lower == kv_dtype_name(d)) return d;
  return invalid_argument("unknown KV cache dtype '" + text + "' (use f32 or f16)");
}

size_t kv_dtype_bytes(KvDType dtype) {
  switch (dtype) {
    case KvDType::F32:
      return 4;
    case KvDType::F16:
      return 2;
  }
  KVS_ASSERT(false, "bad KvDType");
  return 0;
}

size_t kv_dtype_row_bytes(KvDType dtype, int64_t num_elements) {
  return size_t(num_elements) * kv_dtype_bytes(dtype);
}

Status KvLayout::validate() const {
  if (num_layers <= 0)
    return invalid_argument("KV layout: num_layers must be > 0, got " + std::to_string(num_layers));
  if (num_kv_heads <= 0)
    return invalid_argument("KV layout: num_kv_heads must be > 0, got " + std::to_string(num_kv_heads));
  if (head_dim <= 0)
    return invalid_argument("KV layout: head_dim must be > 0, got " + std::to_string(head_dim));
  if (block_size <= 0)
    return invalid_argument("KV layout: block_size must be > 0, got " + std::to_string(block_size));
  // block_bytes() = 2 * layers * block_size * kv_heads * row bytes; refuse shapes whose product
  // would wrap size_t rather than size an arena from a wrapped number.
  size_t bytes = kv_dtype_row_bytes(dtype, head_dim);
  for (size_t factor : {size_t(num_kv_heads), size_t(block_size), size_t(num_layers), size_t(2)})
    if (__builtin_mul_overflow(bytes, factor, &bytes))
      return invalid_argument("KV layout: block size in bytes overflows");
  return Status::ok_status();
}

Expected<int32_t> num_blocks_for_bytes(const KvLayout& layout, uint64_t budget_bytes) {
  KVS_RETURN_IF_ERROR(layout.validate());
  uint64_t n = budget_bytes / layout.block_bytes();
  if (n == 0)
    return invalid_argument("KV memory budget of " + format_bytes(budget_bytes) +
                            " holds no block (one block is " + format_bytes(layout.block_bytes()) + ")");
  return int32_t(std::min<uint64_t>(n, uint64_t(std::numeric_limits<int32_t>::max())));
}

Expected<int32_t> num_blocks_for_memory(const KvLayout& layout, const std::string& budget_text) {
  KVS_ASSIGN_OR_RETURN(uint64_t bytes, parse_memory_budget(budget_text));
  return num_blocks_for_bytes(layout, bytes);
}

Expected<int32_t> num_blocks_for_tokens(const KvLayout& layout, int64_t num_tokens) {
  KVS_RETURN_IF_ERROR(layout.validate());
  if (num_tokens < 0) return invalid_argument("token count must be >= 0, got " + std::to_string(num_tokens));
  int64_t n = num_tokens / layout.block_size + (num_tokens % layout.block_size != 0 ? 1 : 0);
  if (n > std::numeric_limits<int32_t>::max())
    return invalid_argument("token count " + std::to_string(num_tokens) + " needs more than 2^31 blocks");
  return int32_t(std::max<int64_t>(n, 1));
}

}  // namespace kvserve

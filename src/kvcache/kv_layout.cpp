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
    case KvDType::BF16:
      return "bf16";
    case KvDType::Q8_0:
      return "q8_0";
    case KvDType::Q4_0:
      return "q4_0";
  }
  return "unknown";
}

Expected<KvDType> parse_kv_dtype(const std::string& text) {
  std::string lower;
  for (char c : text) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (KvDType d : kAllKvDTypes)
    if (lower == kv_dtype_name(d)) return d;
  return invalid_argument("unknown KV cache type '" + text + "' (use f32, f16, bf16, q8_0 or q4_0)");
}

bool kv_dtype_is_quantized(KvDType dtype) { return dtype == KvDType::Q8_0 || dtype == KvDType::Q4_0; }

size_t kv_dtype_bytes(KvDType dtype) {
  switch (dtype) {
    case KvDType::F32:
      return 4;
    case KvDType::F16:
    case KvDType::BF16:
      return 2;
    case KvDType::Q8_0:
    case KvDType::Q4_0:
      break;
  }
  KVS_ASSERT(false, "kv_dtype_bytes: not a float KvDType (use kv_dtype_row_bytes)");
  return 0;
}

size_t kv_dtype_row_bytes(KvDType dtype, int64_t num_elements) {
  const size_t n = size_t(num_elements);
  const size_t full = n / kKvQuantGroup;                   // F: full groups
  const size_t rest = n % kKvQuantGroup;                   // r: values of the short last group
  const size_t groups = full + (rest != 0 ? 1 : 0);        // G
  switch (dtype) {
    case KvDType::F32:
      return 4 * n;
    case KvDType::F16:
    case KvDType::BF16:
      return 2 * n;
    case KvDType::Q8_0:
      return 2 * groups + n;
    case KvDType::Q4_0:
      return 2 * groups + 16 * full + (rest + 1) / 2;
  }
  KVS_ASSERT(false, "bad KvDType");
  return 0;
}

std::string KvLayout::type_signature() const {
  return std::string("k=") + kv_dtype_name(k_dtype) + ",v=" + kv_dtype_name(v_dtype) +
         ",bs=" + std::to_string(block_size) + (tiled ? ",tiled2" : "");
}

bool KvLayout::can_tile() const {
  auto tileable = [](KvDType t) { return t == KvDType::Q8_0 || t == KvDType::Q4_0; };
  return tileable(k_dtype) && tileable(v_dtype) && head_dim > 0 && head_dim % 32 == 0 &&
         block_size > 0 && block_size % 16 == 0;
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
  if (tiled && !can_tile())
    return invalid_argument("KV layout: the tiled layout needs q8_0 or q4_0 K and V, head_dim % 32 == 0 and block_size % 16 == 0");
  // Refuse shapes whose block_bytes() would wrap size_t rather than size an arena from a
  // wrapped number.
  // (K row + V row) * kv_heads * block_size * layers must fit; the row sum cannot wrap.
  size_t bytes = kv_dtype_row_bytes(k_dtype, head_dim) + kv_dtype_row_bytes(v_dtype, head_dim);
  for (size_t factor : {size_t(num_kv_heads), size_t(block_size), size_t(num_layers)})
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

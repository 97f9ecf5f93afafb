// The ggml tensor encodings a GGUF file may name, with their block geometry.
// A row of n elements of type T occupies (n / block_size(T)) * type_size(T) bytes and
// n must be a multiple of block_size(T).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kvserve {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeTraits {
  const char* name;   // "q4_K"
  int64_t block_size;  // elements per block
  size_t type_size;    // bytes per block
};

// nullopt for ids that are not a known ggml type (including the removed 31..33, 36..38).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
const char* ggml_type_name(GgmlType t);
int64_t ggml_block_size(GgmlType t);
size_t ggml_type_size(GgmlType t);
// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t ggml_row_size(GgmlType t, int64_t n) {
  return size_t(n / ggml_block_size(t)) * ggml_type_size(t);
}
// Parses "q4_K", "Q4_K", "q4_k", "f16", ... (case-insensitive).
std::optional<GgmlType> parse_ggml_type(const std::string& name);

}  // namespace kvserve

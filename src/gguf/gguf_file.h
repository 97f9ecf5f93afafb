// GGUF reader (versions 2 and 3). The file is mmapped; tensor data is never copied.
//
// Byte layout (all little-endian), as validated by GgufFile::open:
//  1. magic        4 bytes  "GGUF"
//  2. version      uint32   2 or 3 (v1 used 32-bit counts and is rejected)
//  3. n_tensors    uint64
//  4. n_kv         uint64
//  5. n_kv metadata entries, each:
//       key        gguf string (uint64 length + bytes, no NUL)
//       type       uint32   GgufValueType
//       value      scalar of that type | string | array:
//                  array = uint32 elem_type + uint64 count + count elements (nested arrays allowed)
//  6. n_tensors tensor infos, each:
//       name       gguf string
//       n_dims     uint32   (1..4)
//       ne[n_dims] uint64   ne[0] is the contiguous (innermost) dimension
//       type       uint32   GgmlType
//       offset     uint64   relative to the data section; multiple of the alignment
//  7. padding to `general.alignment` (uint32 metadata, default 32, a power of two)
//  8. data section: tensor bytes at their offsets; each tensor's bytes =
//     (ne[0] / block_size) * type_size * ne[1] * ne[2] * ne[3]
//
// Every count, length, offset and size is checked against the file size before use, so a
// truncated or corrupt file yields a Status naming the file and the field, never a crash.
// Further rules: keys and tensor names are unique and tensor names non-empty; a bool byte
// is 0 or 1; arrays nest at most 16 deep; `general.alignment`, when present, is a uint32
// nonzero power of two; each ne >= 0, the element count fits int64 and the byte size 64
// bits; ne[0] is a multiple of the type's block size; offsets are aligned; tensor bytes lie
// inside the file. A file without tensors may end before the data section (vocab-only files
// do). Codes: kCorrupt for format violations, kUnsupported for other versions (and
// big-endian files), MmapFile's kNotFound / kIoError / kInvalidArgument for the path itself.
// Typed getters: kNotFound for a missing key, kInvalidArgument for the wrong type.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/types.h"
#include "util/mmap_file.h"
#include "util/status.h"

namespace kvserve {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_value_type_name(GgufValueType t);

// One metadata value. Scalars are widened on read (integers to int64/uint64, floats to double);
// type() still reports the type stored in the file. Arrays keep their element type and hold
// their elements in the vector matching it (strings, ints, floats, bools or nested values).
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;

  // scalars
  int64_t i = 0;         // INT8..INT64 and UINT8..UINT32 (UINT64 also here if it fits)
  uint64_t u = 0;        // UINT64 raw (and all unsigned types)
  double f = 0;          // FLOAT32/FLOAT64
  bool b = false;        // BOOL
  std::string str;       // STRING

  // arrays (type == ARRAY)
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<std::string> arr_str;   // elem STRING
  std::vector<int64_t> arr_int;       // elem integer types and BOOL (0/1)
  std::vector<double> arr_float;      // elem FLOAT32/FLOAT64
  std::vector<GgufValue> arr_nested;  // elem ARRAY
  size_t array_size() const;

  bool is_integer() const;  // any integer scalar type
  bool is_float() const;    // FLOAT32/FLOAT64
  // Human-readable rendering for `inspect` (arrays abbreviated after `max_items`).
  std::string to_string(size_t max_items = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] contiguous; unused trailing dims are 1
  uint64_t offset = 0;           // relative to the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mmap

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return ggml_row_size(type, ne[0]); }
  std::string shape_string() const;  // "[576, 49152]"
};

class GgufFile {
 public:
  static Expected<std::shared_ptr<GgufFile>> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return map_.size(); }
  // Drops this process's resident pages of the file (MmapFile::release_pages); tensor data stays
  // readable.
  void release_pages() const { map_.release_pages(); }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed getters: errors name the file and the key (missing, or wrong type).
  Expected<int64_t> get_int(std::string_view key) const;      // any integer type
  Expected<double> get_float(std::string_view key) const;     // float or integer types
  Expected<std::string> get_string(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  int64_t get_int_or(std::string_view key, int64_t dflt) const;
  double get_float_or(std::string_view key, double dflt) const;
  std::string get_string_or(std::string_view key, const std::string& dflt) const;
  bool get_bool_or(std::string_view key, bool dflt) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

 private:
  friend class GgufParser;
  MmapFile map_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace kvserve

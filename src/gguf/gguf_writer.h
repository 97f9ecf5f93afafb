// GgufWriter: builds a GGUF v3 file (the byte layout documented in gguf_file.h), in memory or
// on disk. Used by `kvserve quantize` / `synth` and by tests, which patch its valid output to
// make corrupt files.
//
// Output layout: header, metadata in the order added, tensor infos in the order added, zero
// padding to the alignment, then each tensor's bytes at an aligned offset (in the order added),
// each followed by zero padding to the alignment so the file size is a multiple of it too.
//
// Errors are sticky: the adders return nothing, the first invalid call (duplicate key or
// tensor name, out-of-range value, bad shape, data size mismatch) is remembered, and
// status() / to_bytes() / write_file() report it. Later calls after an error are ignored.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/types.h"
#include "util/status.h"

namespace kvserve {

class GgufWriter {
 public:
  static constexpr uint32_t kDefaultAlignment = 32;

  // Scalars and strings.
  void add_uint8(std::string key, uint8_t v);
  void add_int8(std::string key, int8_t v);
  void add_uint16(std::string key, uint16_t v);
  void add_int16(std::string key, int16_t v);
  void add_uint32(std::string key, uint32_t v);
  void add_int32(std::string key, int32_t v);
  void add_uint64(std::string key, uint64_t v);
  void add_int64(std::string key, int64_t v);
  void add_float32(std::string key, float v);
  void add_float64(std::string key, double v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);

  // Arrays. `elem` picks the stored element type; values must fit it (BOOL: 0 or 1;
  // UINT64 elements are taken as their bit pattern, as GgufValue::arr_int stores them).
  void add_array_int(std::string key, GgufValueType elem, std::vector<int64_t> values);
  void add_array_float(std::string key, GgufValueType elem, std::vector<double> values);  // FLOAT32/FLOAT64
  void add_array_string(std::string key, std::vector<std::string> values);

  // Any value, including nested arrays (elements in arr_nested, each of type ARRAY).
  // Integer scalars are written from `i`, except UINT64 which is written from `u`; values read
  // by GgufFile satisfy this, so metadata copies over unchanged.
  void add_value(std::string key, GgufValue value);
  // Like add_value but replaces an existing key in place (keeping its position).
  void set_value(std::string key, GgufValue value);
  bool has_key(std::string_view key) const;

  // Sets general.alignment (uint32; a nonzero power of two). Without it the alignment is 32.
  void set_alignment(uint32_t alignment);

  // shape: 1..4 dims, ne[0] first (contiguous), each >= 0, ne[0] a multiple of the type's
  // block size; data.size() must equal the tensor's byte size.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> shape, std::vector<uint8_t> data);
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> shape, std::span<const uint8_t> data);

  const Status& status() const { return status_; }
  size_t num_kv() const { return kv_.size(); }
  size_t num_tensors() const { return tensors_.size(); }

  Expected<std::vector<uint8_t>> to_bytes() const;
  // Writes `path` via a temporary file in the same folder renamed into place, so a failed
  // write never leaves a truncated file under the final name. Errors name the path.
  Status write_file(const std::string& path) const;
  // Whether write_file(path) could create its temporary file (one is created and removed):
  // callers that spend minutes building the tensors check this first.
  static Status check_writable(const std::string& path);

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  template <typename Sink>
  void serialize(Sink& sink) const;
  // Offsets follow from the alignment, which may be set after the tensors, so both are
  // computed when the file is laid out rather than when a tensor is added.
  uint32_t alignment() const;
  std::vector<uint64_t> tensor_offsets() const;
  void fail(Status s);

  Status status_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

// Value builders for add_value / set_value and for tests.
GgufValue gguf_int_value(GgufValueType type, int64_t v);  // integer types; UINT64 via gguf_uint64_value
GgufValue gguf_uint64_value(uint64_t v);
GgufValue gguf_float_value(GgufValueType type, double v);  // FLOAT32/FLOAT64
GgufValue gguf_bool_value(bool v);
GgufValue gguf_string_value(std::string v);
GgufValue gguf_array_value(GgufValueType elem, std::vector<int64_t> values);  // integer types or BOOL
GgufValue gguf_array_value(GgufValueType elem, std::vector<double> values);   // FLOAT32/FLOAT64
GgufValue gguf_array_value(std::vector<std::string> values);
GgufValue gguf_nested_array_value(std::vector<GgufValue> arrays);  // each of type ARRAY

}  // namespace kvserve

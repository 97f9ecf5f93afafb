// Builders for GgufValue (used with GgufWriter::add_value) and the writer-side check that a
// value is encodable as its declared type.
#include <limits>

#include "gguf/gguf_value_check.h"
#include "gguf/gguf_writer.h"

namespace kvserve {
namespace {

bool is_float_type(GgufValueType t) { return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64; }
bool is_int_type(GgufValueType t) {
  return t != GgufValueType::STRING && t != GgufValueType::ARRAY && t != GgufValueType::BOOL &&
         !is_float_type(t);
}

// Inclusive range of an integer type as held in int64 (UINT64 elements are bit patterns, so any).
bool int_fits(GgufValueType t, int64_t v) {
  switch (t) {
    case GgufValueType::UINT8:
      return v >= 0 && v <= std::numeric_limits<uint8_t>::max();
    case GgufValueType::INT8:
      return v >= std::numeric_limits<int8_t>::min() && v <= std::numeric_limits<int8_t>::max();
    case GgufValueType::UINT16:
      return v >= 0 && v <= std::numeric_limits<uint16_t>::max();
    case GgufValueType::INT16:
      return v >= std::numeric_limits<int16_t>::min() && v <= std::numeric_limits<int16_t>::max();
    case GgufValueType::UINT32:
      return v >= 0 && v <= std::numeric_limits<uint32_t>::max();
    case GgufValueType::INT32:
      return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
    case GgufValueType::BOOL:
      return v == 0 || v == 1;
    default:
      return true;
  }
}

constexpr uint32_t kMaxValueTypeId = uint32_t(GgufValueType::FLOAT64);
// Matches the reader's limit, so whatever the writer emits reads back.
constexpr int kMaxArrayDepth = 16;

}  // namespace

std::string check_gguf_value(const GgufValue& v, int depth) {
  if (uint32_t(v.type) > kMaxValueTypeId) return "has unknown value type " + std::to_string(uint32_t(v.type));
  if (v.type == GgufValueType::UINT64) return "";
  if (is_int_type(v.type) && !int_fits(v.type, v.i)) {
    return "value " + std::to_string(v.i) + " does not fit " + gguf_value_type_name(v.type);
  }
  if (v.type != GgufValueType::ARRAY) return "";

  if (depth >= kMaxArrayDepth)
    return "nests arrays deeper than " + std::to_string(kMaxArrayDepth) + " levels";
  if (uint32_t(v.elem_type) > kMaxValueTypeId) {
    return "is an array of unknown value type " + std::to_string(uint32_t(v.elem_type));
  }
  // Exactly one element vector may be used: the one elem_type selects.
  const GgufValueType e = v.elem_type;
  const bool int_elems = is_int_type(e) || e == GgufValueType::BOOL;
  if ((!int_elems && !v.arr_int.empty()) || (!is_float_type(e) && !v.arr_float.empty()) ||
      (e != GgufValueType::STRING && !v.arr_str.empty()) ||
      (e != GgufValueType::ARRAY && !v.arr_nested.empty())) {
    return std::string("is an array of ") + gguf_value_type_name(e) +
           " with elements in another type's vector";
  }
  for (size_t k = 0; int_elems && k < v.arr_int.size(); ++k) {
    if (!int_fits(e, v.arr_int[k])) {
      return "element #" + std::to_string(k) + " value " + std::to_string(v.arr_int[k]) + " does not fit " +
             gguf_value_type_name(e);
    }
  }
  for (size_t k = 0; k < v.arr_nested.size(); ++k) {
    if (v.arr_nested[k].type != GgufValueType::ARRAY) {
      return "element #" + std::to_string(k) + " of a nested array has type " +
             gguf_value_type_name(v.arr_nested[k].type) + " (must be array)";
    }
    std::string err = check_gguf_value(v.arr_nested[k], depth + 1);
    if (!err.empty()) return "element #" + std::to_string(k) + " " + err;
  }
  return "";
}

GgufValue gguf_int_value(GgufValueType type, int64_t v) {
  GgufValue out;
  out.type = type;
  out.i = v;
  out.u = v >= 0 ? uint64_t(v) : 0;
  out.b = v != 0;
  return out;
}

GgufValue gguf_uint64_value(uint64_t v) {
  GgufValue out;
  out.type = GgufValueType::UINT64;
  out.u = v;
  out.i = v <= uint64_t(std::numeric_limits<int64_t>::max()) ? int64_t(v) : 0;
  return out;
}

GgufValue gguf_float_value(GgufValueType type, double v) {
  GgufValue out;
  out.type = type;
  out.f = v;
  return out;
}

GgufValue gguf_bool_value(bool v) {
  GgufValue out = gguf_int_value(GgufValueType::BOOL, v ? 1 : 0);
  out.b = v;
  return out;
}

GgufValue gguf_string_value(std::string v) {
  GgufValue out;
  out.type = GgufValueType::STRING;
  out.str = std::move(v);
  return out;
}

GgufValue gguf_array_value(GgufValueType elem, std::vector<int64_t> values) {
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.elem_type = elem;
  out.arr_int = std::move(values);
  return out;
}

GgufValue gguf_array_value(GgufValueType elem, std::vector<double> values) {
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.elem_type = elem;
  out.arr_float = std::move(values);
  return out;
}

GgufValue gguf_array_value(std::vector<std::string> values) {
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.elem_type = GgufValueType::STRING;
  out.arr_str = std::move(values);
  return out;
}

GgufValue gguf_nested_array_value(std::vector<GgufValue> arrays) {
  GgufValue out;
  out.type = GgufValueType::ARRAY;
  out.elem_type = GgufValueType::ARRAY;
  out.arr_nested = std::move(arrays);
  return out;
}

}  // namespace kvserve

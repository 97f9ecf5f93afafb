// GgufValue and GgufTensorInfo helpers: type names, sizes, and text rendering for `inspect`.
#include <charconv>
#include <string>

#include "gguf/gguf_file.h"
#include "gguf/gguf_text.h"

namespace kvserve {
namespace {

// Shortest text that reads back to the same value; FLOAT32 renders as a float so 1e-5f
// prints "1e-05" rather than the widened double's 17 digits.
std::string format_float(double v, GgufValueType t) {
  char buf[64];
  auto r = t == GgufValueType::FLOAT32 ? std::to_chars(buf, buf + sizeof buf, float(v))
                                       : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string format_int(int64_t v, GgufValueType t) {
  // arr_int stores UINT64 elements as their bit pattern; show them unsigned.
  return t == GgufValueType::UINT64 ? std::to_string(uint64_t(v)) : std::to_string(v);
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
      return "uint8";
    case GgufValueType::INT8:
      return "int8";
    case GgufValueType::UINT16:
      return "uint16";
    case GgufValueType::INT16:
      return "int16";
    case GgufValueType::UINT32:
      return "uint32";
    case GgufValueType::INT32:
      return "int32";
    case GgufValueType::FLOAT32:
      return "float32";
    case GgufValueType::BOOL:
      return "bool";
    case GgufValueType::STRING:
      return "string";
    case GgufValueType::ARRAY:
      return "array";
    case GgufValueType::UINT64:
      return "uint64";
    case GgufValueType::INT64:
      return "int64";
    case GgufValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

size_t GgufValue::array_size() const {
  if (type != GgufValueType::ARRAY) return 0;
  switch (elem_type) {
    case GgufValueType::STRING:
      return arr_str.size();
    case GgufValueType::ARRAY:
      return arr_nested.size();
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return arr_float.size();
    default:
      return arr_int.size();
  }
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const { return type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64; }

std::string GgufValue::to_string(size_t max_items) const {
  switch (type) {
    case GgufValueType::BOOL:
      return b ? "true" : "false";
    case GgufValueType::STRING:
      return gguf_quote(str, 256, '"');
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      return format_float(f, type);
    case GgufValueType::UINT64:
      return std::to_string(u);
    case GgufValueType::ARRAY:
      break;
    default:
      return std::to_string(i);
  }
  const size_t n = array_size();
  std::string out = "[";
  for (size_t k = 0; k < n && k < max_items; ++k) {
    if (k) out += ", ";
    switch (elem_type) {
      case GgufValueType::STRING:
        out += gguf_quote(arr_str[k], 64, '"');
        break;
      case GgufValueType::ARRAY:
        out += arr_nested[k].to_string(max_items);
        break;
      case GgufValueType::FLOAT32:
      case GgufValueType::FLOAT64:
        out += format_float(arr_float[k], elem_type);
        break;
      case GgufValueType::BOOL:
        out += arr_int[k] ? "true" : "false";
        break;
      default:
        out += format_int(arr_int[k], elem_type);
        break;
    }
  }
  if (n > max_items) out += ", ... (" + std::to_string(n) + " items)";
  out += "]";
  return out;
}

std::string GgufTensorInfo::shape_string() const {
  std::string out = "[";
  for (int d = 0; d < n_dims; ++d) {
    if (d) out += ", ";
    out += std::to_string(ne[d]);
  }
  return out + "]";
}

}  // namespace kvserve

#include "gguf/gguf_parser.h"

#include <cstring>
#include <limits>

#include "gguf/checked_math.h"
#include "gguf/gguf_text.h"

namespace kvserve {
namespace {

constexpr uint32_t kMaxValueTypeId = uint32_t(GgufValueType::FLOAT64);
constexpr uint64_t kNoElement = std::numeric_limits<uint64_t>::max();
// Real files never nest arrays; the limit keeps a crafted file from recursing the stack away.
constexpr int kMaxArrayDepth = 16;
// Smallest possible encodings, used to bound counts before anything is reserved:
// a kv is key length (8) + type (4) + a 1-byte value; a tensor info is name length (8) +
// n_dims (4) + one ne (8) + type (4) + offset (8); a string is its length (8); an array
// is elem type (4) + count (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;

// Encoded size of a fixed-size value type; 0 for STRING and ARRAY.
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
      return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY:
      return 0;
  }
  return 0;
}

uint64_t min_encoded_size(GgufValueType t) {
  if (t == GgufValueType::STRING) return kMinStringBytes;
  if (t == GgufValueType::ARRAY) return kMinArrayBytes;
  return scalar_size(t);
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Widens one fixed-size integer (or bool) element as GgufValue::arr_int stores it.
// UINT64 above INT64_MAX wraps to its two's-complement bit pattern, so no value is lost.
int64_t load_int(GgufValueType t, const uint8_t* p) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::BOOL:
      return load<uint8_t>(p);
    case GgufValueType::INT8:
      return load<int8_t>(p);
    case GgufValueType::UINT16:
      return load<uint16_t>(p);
    case GgufValueType::INT16:
      return load<int16_t>(p);
    case GgufValueType::UINT32:
      return load<uint32_t>(p);
    case GgufValueType::INT32:
      return load<int32_t>(p);
    case GgufValueType::UINT64:
      return static_cast<int64_t>(load<uint64_t>(p));
    case GgufValueType::INT64:
      return load<int64_t>(p);
    default:
      return 0;
  }
}

std::string describe(const std::string& what, uint64_t elem) {
  return elem == kNoElement ? what : what + " element #" + std::to_string(elem);
}

std::string render_magic(const uint8_t* p) {
  return gguf_quote(std::string_view(reinterpret_cast<const char*>(p), 4));
}

}  // namespace

GgufParser::GgufParser(GgufFile& file)
    : file_(file), path_(file.map_.path()), in_(file.map_.data(), file.map_.size()) {}

Status GgufParser::parse() {
  uint64_t n_tensors = 0, n_kv = 0;
  KVS_RETURN_IF_ERROR(parse_header(&n_tensors, &n_kv));
  KVS_RETURN_IF_ERROR(parse_metadata(n_kv));
  KVS_RETURN_IF_ERROR(apply_alignment());
  KVS_RETURN_IF_ERROR(parse_tensor_infos(n_tensors));
  return place_tensor_data();
}

Status GgufParser::truncated(const std::string& what, uint64_t need) const {
  return corrupt(path_ + ": truncated while reading " + what + " (need " + std::to_string(need) +
                 " bytes at offset " + std::to_string(in_.pos()) + ", file size " +
                 std::to_string(in_.size()) + ")");
}

Status GgufParser::bad(const std::string& msg) const { return corrupt(path_ + ": " + msg); }

Status GgufParser::check_count(const std::string& what, uint64_t count, uint64_t min_size,
                               uint64_t* reserve) const {
  uint64_t need = 0;
  if (checked_mul(count, min_size, &need) && need <= in_.remaining()) {
    *reserve = count;
    return Status::ok_status();
  }
  if (count <= in_.remaining()) {
    *reserve = in_.remaining() / min_size;
    return Status::ok_status();
  }
  return bad(what + " " + std::to_string(count) + " cannot fit: at least " + std::to_string(min_size) +
             " bytes each, but only " + std::to_string(in_.remaining()) + " bytes remain after offset " +
             std::to_string(in_.pos()) + " (file size " + std::to_string(in_.size()) + ")");
}

Status GgufParser::parse_header(uint64_t* n_tensors, uint64_t* n_kv) {
  if (in_.size() == 0) return bad("empty file (0 bytes) where the magic 'GGUF' was expected");
  const uint8_t* magic = nullptr;
  if (!in_.read_bytes(4, &magic)) return truncated("magic", 4);
  if (std::memcmp(magic, "GGUF", 4) != 0)
    return bad("bad magic " + render_magic(magic) + " (expected 'GGUF')");

  uint32_t version = 0;
  if (!in_.read(&version)) return truncated("version", 4);
  if (version == 1) {
    return unsupported(path_ +
                       ": GGUF version 1 is not supported (it used 32-bit counts); "
                       "re-convert the model with a current llama.cpp");
  }
  if (version != 2 && version != 3) {
    uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      return unsupported(path_ + ": version field reads " + std::to_string(version) +
                         ": this is a big-endian GGUF, which is not supported");
    }
    return unsupported(path_ + ": unsupported GGUF version " + std::to_string(version) +
                       " (expected 2 or 3)");
  }
  file_.version_ = version;

  if (!in_.read(n_tensors)) return truncated("n_tensors", 8);
  if (!in_.read(n_kv)) return truncated("n_kv", 8);
  // Early rejection of absurd counts; each section checks again at its own position.
  uint64_t unused = 0;
  KVS_RETURN_IF_ERROR(check_count("n_tensors", *n_tensors, kMinTensorInfoBytes, &unused));
  return check_count("n_kv", *n_kv, kMinKvBytes, &unused);
}

Status GgufParser::parse_string(const std::string& what, uint64_t elem, std::string* out) {
  uint64_t len = 0;
  if (!in_.read(&len)) return truncated(describe(what, elem) + " string length", 8);
  const uint8_t* bytes = nullptr;
  if (!in_.read_bytes(len, &bytes)) {
    return bad(describe(what, elem) + ": string length " + std::to_string(len) +
               " runs past end of file (at offset " + std::to_string(in_.pos()) + ", file size " +
               std::to_string(in_.size()) + ")");
  }
  out->assign(reinterpret_cast<const char*>(bytes), size_t(len));
  return Status::ok_status();
}

Status GgufParser::parse_metadata(uint64_t n_kv) {
  uint64_t reserve = 0;
  KVS_RETURN_IF_ERROR(check_count("n_kv", n_kv, kMinKvBytes, &reserve));
  file_.kv_.reserve(size_t(reserve));
  file_.kv_index_.reserve(size_t(reserve));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string base = "metadata key #" + std::to_string(i);
    std::string key;
    KVS_RETURN_IF_ERROR(parse_string(base, kNoElement, &key));
    if (auto it = file_.kv_index_.find(key); it != file_.kv_index_.end()) {
      return bad(base + " " + gguf_quote(key) + " duplicates metadata key #" + std::to_string(it->second));
    }
    const std::string what = base + " " + gguf_quote(key);
    uint32_t type_id = 0;
    if (!in_.read(&type_id)) return truncated(what + " type", 4);
    if (type_id > kMaxValueTypeId) return bad(what + " has unknown value type " + std::to_string(type_id));
    GgufValue value;
    KVS_RETURN_IF_ERROR(parse_value(GgufValueType(type_id), what + " value", 0, &value));
    file_.kv_index_.emplace(key, file_.kv_.size());
    file_.kv_.emplace_back(std::move(key), std::move(value));
  }
  return Status::ok_status();
}

Status GgufParser::parse_value(GgufValueType type, const std::string& what, int depth, GgufValue* out) {
  out->type = type;
  if (type == GgufValueType::STRING) return parse_string(what, kNoElement, &out->str);
  if (type == GgufValueType::ARRAY) return parse_array(what, depth, out);

  const uint64_t size = scalar_size(type);
  const uint8_t* p = nullptr;
  if (!in_.read_bytes(size, &p)) return truncated(what, size);
  switch (type) {
    case GgufValueType::FLOAT32:
      out->f = load<float>(p);
      break;
    case GgufValueType::FLOAT64:
      out->f = load<double>(p);
      break;
    case GgufValueType::BOOL:
      // Only 0 and 1 are defined; anything else means the bytes are not what the type claims.
      if (*p > 1) return bad(what + " is a bool with byte value " + std::to_string(*p) + " (must be 0 or 1)");
      out->b = *p != 0;
      out->i = *p;
      out->u = *p;
      break;
    case GgufValueType::UINT64:
      out->u = load<uint64_t>(p);
      // i holds the value only when it fits; get_int reports the ones that do not.
      out->i = out->u <= uint64_t(std::numeric_limits<int64_t>::max()) ? int64_t(out->u) : 0;
      break;
    default:
      out->i = load_int(type, p);
      // Non-negative values are mirrored in u so a caller reading either field gets them.
      out->u = out->i >= 0 ? uint64_t(out->i) : 0;
      break;
  }
  return Status::ok_status();
}

Status GgufParser::parse_array(const std::string& what, int depth, GgufValue* out) {
  if (depth >= kMaxArrayDepth) {
    return bad(what + " nests arrays deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  uint32_t elem_id = 0;
  if (!in_.read(&elem_id)) return truncated(what + " array element type", 4);
  if (elem_id > kMaxValueTypeId)
    return bad(what + " is an array of unknown value type " + std::to_string(elem_id));
  const auto elem = GgufValueType(elem_id);
  uint64_t count = 0;
  if (!in_.read(&count)) return truncated(what + " array count", 8);
  uint64_t reserve = 0;
  KVS_RETURN_IF_ERROR(check_count(what + " array count", count, min_encoded_size(elem), &reserve));
  out->elem_type = elem;

  if (elem == GgufValueType::STRING) {
    out->arr_str.reserve(size_t(reserve));
    for (uint64_t k = 0; k < count; ++k) {
      KVS_RETURN_IF_ERROR(parse_string(what, k, &out->arr_str.emplace_back()));
    }
    return Status::ok_status();
  }
  if (elem == GgufValueType::ARRAY) {
    // A GgufValue is far larger than the 12 bytes a nested array may occupy in the file, so
    // grow as elements parse instead of trusting the count for a reservation.
    for (uint64_t k = 0; k < count; ++k) {
      GgufValue nested;
      nested.type = GgufValueType::ARRAY;
      KVS_RETURN_IF_ERROR(parse_array(describe(what, k), depth + 1, &nested));
      out->arr_nested.push_back(std::move(nested));
    }
    return Status::ok_status();
  }

  // Fixed-size elements: check_count proved count <= remaining bytes, so count * size
  // (size <= 8) cannot overflow.
  const uint64_t size = scalar_size(elem);
  const uint8_t* p = nullptr;
  if (!in_.read_bytes(count * size, &p)) return truncated(what + " array elements", count * size);
  if (elem == GgufValueType::FLOAT32 || elem == GgufValueType::FLOAT64) {
    out->arr_float.resize(size_t(count));
    for (uint64_t k = 0; k < count; ++k, p += size) {
      out->arr_float[k] = elem == GgufValueType::FLOAT32 ? double(load<float>(p)) : load<double>(p);
    }
    return Status::ok_status();
  }
  out->arr_int.resize(size_t(count));
  for (uint64_t k = 0; k < count; ++k, p += size) {
    if (elem == GgufValueType::BOOL && *p > 1) {
      return bad(describe(what, k) + " is a bool with byte value " + std::to_string(*p) +
                 " (must be 0 or 1)");
    }
    out->arr_int[k] = load_int(elem, p);
  }
  return Status::ok_status();
}

Status GgufParser::apply_alignment() {
  const GgufValue* v = file_.find("general.alignment");
  if (!v) return Status::ok_status();  // the default of 32 stays
  if (v->type != GgufValueType::UINT32) {
    return bad("metadata key 'general.alignment' has type " + std::string(gguf_value_type_name(v->type)) +
               " (must be uint32)");
  }
  if (!is_power_of_two(v->u)) {
    return bad("metadata key 'general.alignment' is " + std::to_string(v->u) +
               " (must be a nonzero power of two)");
  }
  file_.alignment_ = size_t(v->u);
  return Status::ok_status();
}

Status GgufParser::parse_tensor_infos(uint64_t n_tensors) {
  uint64_t reserve = 0;
  KVS_RETURN_IF_ERROR(check_count("n_tensors", n_tensors, kMinTensorInfoBytes, &reserve));
  file_.tensors_.reserve(size_t(reserve));
  file_.tensor_index_.reserve(size_t(reserve));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    KVS_RETURN_IF_ERROR(parse_tensor_info(i, &t));
    file_.tensor_index_.emplace(t.name, file_.tensors_.size());
    file_.tensors_.push_back(std::move(t));
  }
  return Status::ok_status();
}

Status GgufParser::parse_tensor_info(uint64_t index, GgufTensorInfo* out) {
  const std::string base = "tensor #" + std::to_string(index);
  KVS_RETURN_IF_ERROR(parse_string(base + " name", kNoElement, &out->name));
  // Tensors are looked up by name; an empty one is also what zero padding read as a tensor
  // info looks like (n_tensors larger than the real count).
  if (out->name.empty()) return bad(base + " has an empty name");
  if (auto it = file_.tensor_index_.find(out->name); it != file_.tensor_index_.end()) {
    return bad(base + " name " + gguf_quote(out->name) + " duplicates tensor #" + std::to_string(it->second));
  }
  const std::string what = "tensor " + gguf_quote(out->name);

  uint32_t n_dims = 0;
  if (!in_.read(&n_dims)) return truncated(what + " n_dims", 4);
  if (n_dims < 1 || n_dims > 4)
    return bad(what + " has n_dims " + std::to_string(n_dims) + " (must be 1..4)");
  out->n_dims = int(n_dims);

  int64_t nelements = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const std::string dim = "ne[" + std::to_string(d) + "]";
    uint64_t raw = 0;
    if (!in_.read(&raw)) return truncated(what + " " + dim, 8);
    if (raw > uint64_t(std::numeric_limits<int64_t>::max())) {
      return bad(what + " has negative " + dim + " = " + std::to_string(static_cast<int64_t>(raw)));
    }
    out->ne[d] = int64_t(raw);
    // Keep reading the remaining dims so the shape in the message is complete.
    if (!overflow && !checked_mul(nelements, out->ne[d], &nelements)) overflow = true;
  }
  if (overflow) return bad(what + " shape " + out->shape_string() + " has more elements than fit in int64");

  uint32_t type_id = 0;
  if (!in_.read(&type_id)) return truncated(what + " type", 4);
  const auto traits = ggml_type_traits(type_id);
  if (!traits) return bad(what + " has unknown type id " + std::to_string(type_id));
  out->type = GgmlType(type_id);
  if (out->ne[0] % traits->block_size != 0) {
    return bad(what + " ne[0] = " + std::to_string(out->ne[0]) + " is not a multiple of the " + traits->name +
               " block size " + std::to_string(traits->block_size));
  }
  uint64_t nbytes = uint64_t(out->ne[0] / traits->block_size);
  bool fits = checked_mul(nbytes, uint64_t(traits->type_size), &nbytes);
  for (int d = 1; d < 4 && fits; ++d) fits = checked_mul(nbytes, uint64_t(out->ne[d]), &nbytes);
  if (!fits) return bad(what + " shape " + out->shape_string() + ": byte size overflows 64 bits");
  out->nbytes = size_t(nbytes);

  if (!in_.read(&out->offset)) return truncated(what + " offset", 8);
  if (out->offset % file_.alignment_ != 0) {
    return bad(what + " offset " + std::to_string(out->offset) + " is not a multiple of the alignment " +
               std::to_string(file_.alignment_));
  }
  return Status::ok_status();
}

Status GgufParser::place_tensor_data() {
  uint64_t data_offset = 0;
  if (!checked_align_up(in_.pos(), file_.alignment_, &data_offset))
    return bad("data section offset overflows");
  // With no tensors the data section may lie past the end (vocab-only files stop after the
  // metadata), so the bounds are checked per tensor rather than here.
  file_.data_offset_ = size_t(data_offset);
  for (auto& t : file_.tensors_) {
    uint64_t start = 0, end = 0;
    if (!checked_add(data_offset, t.offset, &start) || !checked_add(start, t.nbytes, &end) ||
        end > in_.size()) {
      const std::string at = checked_add(data_offset, t.offset, &start)
                                 ? std::to_string(start)
                                 : std::to_string(t.offset) + " (relative)";
      return bad("tensor " + gguf_quote(t.name) + ": data [offset " + at + ", " + std::to_string(t.nbytes) +
                 " bytes] runs past end of file (size " + std::to_string(in_.size()) + ")");
    }
    t.data = file_.map_.data() + start;
  }
  return Status::ok_status();
}

}  // namespace kvserve

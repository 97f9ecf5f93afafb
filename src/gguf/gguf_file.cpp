// GgufFile: opening (map + parse) and typed metadata lookup. Parsing lives in gguf_parser.cpp.
#include "gguf/gguf_file.h"

#include <limits>

#include "gguf/gguf_parser.h"
#include "gguf/gguf_text.h"

namespace kvserve {

Expected<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(MmapFile map, MmapFile::open(path));
  auto file = std::make_shared<GgufFile>();
  // The map moves in before parsing: tensor data pointers are taken from the file's own map.
  file->map_ = std::move(map);
  GgufParser parser(*file);
  KVS_RETURN_IF_ERROR(parser.parse());
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Status missing_key(const std::string& path, std::string_view key) {
  return not_found(path + ": metadata key " + gguf_quote(key) + " not found");
}

Status wrong_type(const std::string& path, std::string_view key, const GgufValue& v, const char* expected) {
  return invalid_argument(path + ": metadata key " + gguf_quote(key) + " has type " +
                          gguf_value_type_name(v.type) + ", expected " + expected);
}

}  // namespace

Expected<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing_key(path(), key);
  if (!v->is_integer()) return wrong_type(path(), key, *v, "an integer");
  if (v->type == GgufValueType::UINT64 && v->u > uint64_t(std::numeric_limits<int64_t>::max())) {
    return invalid_argument(path() + ": metadata key " + gguf_quote(key) + " value " + std::to_string(v->u) +
                            " does not fit int64");
  }
  return v->i;
}

Expected<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing_key(path(), key);
  if (v->is_float()) return v->f;
  if (v->type == GgufValueType::UINT64) return double(v->u);
  if (v->is_integer()) return double(v->i);
  return wrong_type(path(), key, *v, "a number");
}

Expected<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing_key(path(), key);
  if (v->type != GgufValueType::STRING) return wrong_type(path(), key, *v, "string");
  return v->str;
}

Expected<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing_key(path(), key);
  if (v->type != GgufValueType::BOOL) return wrong_type(path(), key, *v, "bool");
  return v->b;
}

// The *_or getters fall back on a missing key or a value of the wrong type alike: callers use
// them for optional hyperparameters where either means "not given".
int64_t GgufFile::get_int_or(std::string_view key, int64_t dflt) const {
  auto r = get_int(key);
  return r.ok() ? *r : dflt;
}
double GgufFile::get_float_or(std::string_view key, double dflt) const {
  auto r = get_float(key);
  return r.ok() ? *r : dflt;
}
std::string GgufFile::get_string_or(std::string_view key, const std::string& dflt) const {
  auto r = get_string(key);
  return r.ok() ? *r : dflt;
}
bool GgufFile::get_bool_or(std::string_view key, bool dflt) const {
  auto r = get_bool(key);
  return r.ok() ? *r : dflt;
}

}  // namespace kvserve

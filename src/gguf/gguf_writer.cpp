#include "gguf/gguf_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "gguf/checked_math.h"
#include "gguf/gguf_text.h"
#include "gguf/gguf_value_check.h"

namespace kvserve {
namespace {

constexpr uint32_t kVersion = 3;
// ggml's GGML_MAX_NAME is 64 including the NUL; longer names would not load in llama.cpp.
constexpr size_t kMaxTensorName = 63;

// Sinks receive the serialized bytes; `written` drives the alignment padding.
struct CountSink {
  uint64_t written = 0;
  void put(const void*, size_t n) { written += n; }
};
struct VectorSink {
  std::vector<uint8_t>& out;
  uint64_t written = 0;
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    written += n;
  }
};
struct FileSink {
  FILE* f;
  bool ok = true;
  uint64_t written = 0;
  void put(const void* p, size_t n) {
    if (ok && n > 0 && std::fwrite(p, 1, n, f) != n) ok = false;
    written += n;
  }
};

template <typename Sink, typename T>
void put_pod(Sink& sink, T v) {
  sink.put(&v, sizeof v);
}
template <typename Sink>
void put_string(Sink& sink, const std::string& s) {
  put_pod<Sink, uint64_t>(sink, s.size());
  sink.put(s.data(), s.size());
}
template <typename Sink>
void pad_to(Sink& sink, uint64_t alignment) {
  static const uint8_t kZeros[256] = {};
  uint64_t n = (alignment - sink.written % alignment) % alignment;
  while (n > 0) {
    size_t chunk = n < sizeof kZeros ? size_t(n) : sizeof kZeros;
    sink.put(kZeros, chunk);
    n -= chunk;
  }
}

// One integer or bool element/scalar as `t` encodes it (values were range-checked on add).
template <typename Sink>
void put_int(Sink& sink, GgufValueType t, int64_t v) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::BOOL:
      put_pod(sink, uint8_t(v));
      break;
    case GgufValueType::INT8:
      put_pod(sink, int8_t(v));
      break;
    case GgufValueType::UINT16:
      put_pod(sink, uint16_t(v));
      break;
    case GgufValueType::INT16:
      put_pod(sink, int16_t(v));
      break;
    case GgufValueType::UINT32:
      put_pod(sink, uint32_t(v));
      break;
    case GgufValueType::INT32:
      put_pod(sink, int32_t(v));
      break;
    case GgufValueType::UINT64:
      put_pod(sink, uint64_t(v));
      break;
    default:
      put_pod(sink, v);
      break;
  }
}
template <typename Sink>
void put_float(Sink& sink, GgufValueType t, double v) {
  if (t == GgufValueType::FLOAT32) {
    put_pod(sink, float(v));
  } else {
    put_pod(sink, v);
  }
}

template <typename Sink>
void put_array(Sink& sink, const GgufValue& v) {
  put_pod(sink, uint32_t(v.elem_type));
  put_pod<Sink, uint64_t>(sink, v.array_size());
  switch (v.elem_type) {
    case GgufValueType::STRING:
      for (const auto& s : v.arr_str) put_string(sink, s);
      break;
    case GgufValueType::ARRAY:
      for (const auto& n : v.arr_nested) put_array(sink, n);
      break;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      for (double x : v.arr_float) put_float(sink, v.elem_type, x);
      break;
    default:
      for (int64_t x : v.arr_int) put_int(sink, v.elem_type, x);
      break;
  }
}

template <typename Sink>
void put_value(Sink& sink, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::STRING:
      put_string(sink, v.str);
      break;
    case GgufValueType::ARRAY:
      put_array(sink, v);
      break;
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64:
      put_float(sink, v.type, v.f);
      break;
    case GgufValueType::BOOL:
      put_pod(sink, uint8_t(v.b ? 1 : 0));
      break;
    case GgufValueType::UINT64:
      put_pod(sink, v.u);
      break;
    default:
      put_int(sink, v.type, v.i);
      break;
  }
}

}  // namespace

void GgufWriter::fail(Status s) {
  if (status_.ok()) status_ = std::move(s);
}

bool GgufWriter::has_key(std::string_view key) const {
  for (const auto& kv : kv_)
    if (kv.first == key) return true;
  return false;
}

void GgufWriter::set_value(std::string key, GgufValue value) {
  if (!status_.ok()) return;
  if (key.empty()) return fail(invalid_argument("gguf writer: empty metadata key"));
  std::string err = check_gguf_value(value);
  if (err.empty() && key == "general.alignment") {
    // The reader enforces this, so refuse to write a file it would reject.
    if (value.type != GgufValueType::UINT32) {
      err = std::string("has type ") + gguf_value_type_name(value.type) + " (must be uint32)";
    } else if (!is_power_of_two(uint64_t(value.i))) {
      err = "is " + std::to_string(value.i) + " (must be a nonzero power of two)";
    }
  }
  if (!err.empty()) return fail(invalid_argument("gguf writer: metadata key " + gguf_quote(key) + " " + err));
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_value(std::string key, GgufValue value) {
  if (!status_.ok()) return;
  if (has_key(key)) return fail(invalid_argument("gguf writer: duplicate metadata key " + gguf_quote(key)));
  set_value(std::move(key), std::move(value));
}

void GgufWriter::add_uint8(std::string key, uint8_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::UINT8, v));
}
void GgufWriter::add_int8(std::string key, int8_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::INT8, v));
}
void GgufWriter::add_uint16(std::string key, uint16_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::UINT16, v));
}
void GgufWriter::add_int16(std::string key, int16_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::INT16, v));
}
void GgufWriter::add_uint32(std::string key, uint32_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::UINT32, v));
}
void GgufWriter::add_int32(std::string key, int32_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::INT32, v));
}
void GgufWriter::add_uint64(std::string key, uint64_t v) { add_value(std::move(key), gguf_uint64_value(v)); }
void GgufWriter::add_int64(std::string key, int64_t v) {
  add_value(std::move(key), gguf_int_value(GgufValueType::INT64, v));
}
void GgufWriter::add_float32(std::string key, float v) {
  add_value(std::move(key), gguf_float_value(GgufValueType::FLOAT32, v));
}
void GgufWriter::add_float64(std::string key, double v) {
  add_value(std::move(key), gguf_float_value(GgufValueType::FLOAT64, v));
}
void GgufWriter::add_bool(std::string key, bool v) { add_value(std::move(key), gguf_bool_value(v)); }
void GgufWriter::add_string(std::string key, std::string v) {
  add_value(std::move(key), gguf_string_value(std::move(v)));
}
void GgufWriter::add_array_int(std::string key, GgufValueType elem, std::vector<int64_t> values) {
  if (elem == GgufValueType::FLOAT32 || elem == GgufValueType::FLOAT64 || elem == GgufValueType::STRING ||
      elem == GgufValueType::ARRAY) {
    return fail(invalid_argument("gguf writer: metadata key " + gguf_quote(key) +
                                 ": add_array_int needs an "
                                 "integer or bool element type, not " +
                                 gguf_value_type_name(elem)));
  }
  add_value(std::move(key), gguf_array_value(elem, std::move(values)));
}
void GgufWriter::add_array_float(std::string key, GgufValueType elem, std::vector<double> values) {
  if (elem != GgufValueType::FLOAT32 && elem != GgufValueType::FLOAT64) {
    return fail(invalid_argument("gguf writer: metadata key " + gguf_quote(key) +
                                 ": add_array_float needs float32 or float64, not " +
                                 gguf_value_type_name(elem)));
  }
  add_value(std::move(key), gguf_array_value(elem, std::move(values)));
}
void GgufWriter::add_array_string(std::string key, std::vector<std::string> values) {
  add_value(std::move(key), gguf_array_value(std::move(values)));
}

void GgufWriter::set_alignment(uint32_t alignment) {
  set_value("general.alignment", gguf_int_value(GgufValueType::UINT32, alignment));
}

uint32_t GgufWriter::alignment() const {
  for (const auto& kv : kv_)
    if (kv.first == "general.alignment") return uint32_t(kv.second.i);  // validated in set_value
  return kDefaultAlignment;
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> shape,
                            std::span<const uint8_t> data) {
  add_tensor(std::move(name), type, std::move(shape), std::vector<uint8_t>(data.begin(), data.end()));
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  if (!status_.ok()) return;
  const std::string what = "gguf writer: tensor " + gguf_quote(name);
  if (name.empty()) return fail(invalid_argument("gguf writer: empty tensor name"));
  if (name.size() > kMaxTensorName) {
    return fail(invalid_argument(what + " name is longer than " + std::to_string(kMaxTensorName) + " bytes"));
  }
  for (const auto& t : tensors_)
    if (t.name == name)
      return fail(invalid_argument("gguf writer: duplicate tensor name " + gguf_quote(name)));
  const auto traits = ggml_type_traits(uint32_t(type));
  if (!traits) return fail(invalid_argument(what + " has unknown type id " + std::to_string(uint32_t(type))));
  if (shape.empty() || shape.size() > 4) {
    return fail(invalid_argument(what + " has " + std::to_string(shape.size()) + " dims (must be 1..4)"));
  }
  uint64_t nbytes = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) return fail(invalid_argument(what + " has negative ne[" + std::to_string(d) + "]"));
  }
  if (shape[0] % traits->block_size != 0) {
    return fail(invalid_argument(what + " ne[0] = " + std::to_string(shape[0]) +
                                 " is not a multiple of the " + traits->name + " block size " +
                                 std::to_string(traits->block_size)));
  }
  bool fits = checked_mul(uint64_t(shape[0] / traits->block_size), uint64_t(traits->type_size), &nbytes);
  int64_t nelements = shape[0];
  for (size_t d = 1; d < shape.size() && fits; ++d) {
    fits = checked_mul(nbytes, uint64_t(shape[d]), &nbytes) && checked_mul(nelements, shape[d], &nelements);
  }
  if (!fits) return fail(invalid_argument(what + " shape overflows"));
  if (nbytes != data.size()) {
    return fail(invalid_argument(what + " needs " + std::to_string(nbytes) + " bytes of data but got " +
                                 std::to_string(data.size())));
  }
  tensors_.push_back(Tensor{std::move(name), type, std::move(shape), std::move(data)});
}

std::vector<uint64_t> GgufWriter::tensor_offsets() const {
  std::vector<uint64_t> offsets;
  offsets.reserve(tensors_.size());
  uint64_t end = 0;
  const uint64_t a = alignment();
  for (const auto& t : tensors_) {
    uint64_t off = (end + a - 1) / a * a;
    offsets.push_back(off);
    end = off + t.data.size();
  }
  return offsets;
}

template <typename Sink>
void GgufWriter::serialize(Sink& sink) const {
  sink.put("GGUF", 4);
  put_pod(sink, kVersion);
  put_pod<Sink, uint64_t>(sink, tensors_.size());
  put_pod<Sink, uint64_t>(sink, kv_.size());
  for (const auto& [key, value] : kv_) {
    put_string(sink, key);
    put_pod(sink, uint32_t(value.type));
    put_value(sink, value);
  }
  const std::vector<uint64_t> offsets = tensor_offsets();
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    put_string(sink, t.name);
    put_pod(sink, uint32_t(t.shape.size()));
    for (int64_t ne : t.shape) put_pod(sink, uint64_t(ne));
    put_pod(sink, uint32_t(t.type));
    put_pod(sink, offsets[k]);
  }
  const uint64_t a = alignment();
  pad_to(sink, a);
  // Tensor offsets are relative to this point, which is itself aligned, so padding the
  // absolute position is the same as padding the relative one.
  for (const Tensor& t : tensors_) {
    sink.put(t.data.data(), t.data.size());
    pad_to(sink, a);
  }
}

Expected<std::vector<uint8_t>> GgufWriter::to_bytes() const {
  if (!status_.ok()) return status_;
  CountSink count;
  serialize(count);
  std::vector<uint8_t> out;
  out.reserve(size_t(count.written));
  VectorSink sink{out};
  serialize(sink);
  return out;
}

namespace {

// The file write_file(path) puts in place: `path`, or the file it links to (rename() would replace
// the link itself, not the file named through it). An existing path that is not a regular file is
// refused: renaming over /dev/null or a FIFO would replace the node with a model file.
Expected<std::string> output_target(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return path;  // a new file
    return io_error(path + ": " + std::strerror(errno));
  }
  std::string target = path;
  if (S_ISLNK(st.st_mode)) {
    char* real = ::realpath(path.c_str(), nullptr);
    if (real == nullptr) return io_error(path + ": cannot follow the link: " + std::strerror(errno));
    target = real;
    std::free(real);
    if (::stat(target.c_str(), &st) != 0) return io_error(target + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode))
    return io_error(
        path + ": exists and is not a regular file (a model is written to a new file renamed into place)");
  return target;
}

}  // namespace

Status GgufWriter::check_writable(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(const std::string target, output_target(path));
  std::string tmp = target + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return io_error(path + ": cannot create a file there: " + std::strerror(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
  return Status::ok_status();
}

Status GgufWriter::write_file(const std::string& path) const {
  if (!status_.ok()) return status_;
  KVS_ASSIGN_OR_RETURN(const std::string target, output_target(path));
  std::string tmp = target + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) return io_error(path + ": cannot create temporary file " + tmp + ": " + std::strerror(errno));
  FILE* f = fdopen(fd, "wb");
  if (!f) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error(path + ": cannot open temporary file: " + std::strerror(e));
  }
  FileSink sink{f};
  serialize(sink);
  int e = sink.ok ? 0 : errno;
  if (std::fclose(f) != 0 && e == 0) e = errno ? errno : EIO;
  if (!sink.ok || e != 0) {
    ::unlink(tmp.c_str());
    return io_error(path + ": write failed: " + std::strerror(e ? e : EIO));
  }
  // mkstemp creates 0600; a model file is meant to be readable like any other output.
  ::chmod(tmp.c_str(), 0644);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    e = errno;
    ::unlink(tmp.c_str());
    return io_error(path + ": cannot rename temporary file into place: " + std::strerror(e));
  }
  return Status::ok_status();
}

}  // namespace kvserve

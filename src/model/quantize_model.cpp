// Quantization schemes, the per-tensor recipe and `kvserve quantize` (see quantize_model.h).
#include "model/quantize_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tensor/quants.h"

namespace kvserve {
namespace {

// general.file_type values follow the reference's llama_ftype enum so other tools read them.
const QuantScheme kSchemes[] = {
    {"f32", GgmlType::F32, 0, false},     {"f16", GgmlType::F16, 1, false},
    {"bf16", GgmlType::BF16, 32, false},  {"q8_0", GgmlType::Q8_0, 7, false},
    {"q4_0", GgmlType::Q4_0, 2, false},   {"q5_0", GgmlType::Q5_0, 8, false},
    {"q4_k_m", GgmlType::Q4_K, 15, true}, {"q5_k_m", GgmlType::Q5_K, 17, true},
    {"q6_k", GgmlType::Q6_K, 18, false},
};

bool is_k_quant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Applies the block-size fallbacks documented in the header.
GgmlType fit_block(GgmlType t, int64_t ne0) {
  if (is_k_quant(t) && ne0 % 256 != 0) t = t == GgmlType::Q4_K ? GgmlType::Q5_0 : GgmlType::Q8_0;
  if (ggml_block_size(t) > 1 && ne0 % ggml_block_size(t) != 0) t = GgmlType::F16;
  return t;
}

}  // namespace

std::vector<std::string> quant_scheme_names() {
  std::vector<std::string> names;
  for (const QuantScheme& s : kSchemes) names.push_back(s.name);
  return names;
}

Expected<QuantScheme> parse_quant_scheme(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (const QuantScheme& s : kSchemes)
    if (s.name == lower) return s;
  std::string valid;
  for (const std::string& n : quant_scheme_names()) valid += (valid.empty() ? "" : ", ") + n;
  return invalid_argument("unknown type '" + name + "' (valid: " + valid + ")");
}

bool use_more_bits(int layer, int n_layer) {
  // Rounded up so that even a 2-layer model gives its first and last layer the extra bits.
  const int eighth = (n_layer + 7) / 8;
  return layer < eighth || layer >= n_layer - eighth || (layer - eighth) % 3 == 2;
}

int tensor_layer_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t end = name.find('.', 4);
  if (end == std::string::npos || end == 4) return -1;
  int v = 0;
  for (size_t i = 4; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

GgmlType pick_tensor_type(const QuantScheme& scheme, const std::string& name, const std::vector<int64_t>& ne,
                          int n_layer, bool tied_output) {
  // Only 2-D weight matrices are re-encoded; vectors stay f32.
  if (ne.size() != 2 || !ends_with(name, ".weight")) return GgmlType::F32;
  const int64_t ne0 = ne[0];
  GgmlType t = scheme.base;
  const bool is_output = name == "output.weight" || (tied_output && name == "token_embd.weight");
  const bool quantized_4_5 = t == GgmlType::Q4_0 || t == GgmlType::Q5_0;
  if (is_output && (scheme.mixed_k || quantized_4_5)) {
    t = GgmlType::Q6_K;
  } else if (scheme.mixed_k && (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight"))) {
    const int layer = tensor_layer_index(name);
    if (layer >= 0 && use_more_bits(layer, n_layer)) t = GgmlType::Q6_K;
  }
  return fit_block(t, ne0);
}

std::vector<uint8_t> encode_rows(ThreadPool& pool, GgmlType type, int64_t ne0, int64_t rows,
                                 const std::function<void(int64_t row, float* dst)>& make_row) {
  const size_t row_bytes = ggml_row_size(type, ne0);
  std::vector<uint8_t> out(row_bytes * size_t(rows));
  pool.parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    std::vector<float> buf(static_cast<size_t>(ne0));
    for (int64_t r = begin; r < end; ++r) {
      make_row(r, buf.data());
      quantize_row(type, buf.data(), out.data() + size_t(r) * row_bytes, ne0);
    }
  });
  return out;
}

Expected<QuantizeStats> quantize_model(const std::string& in_path, const std::string& out_path,
                                       const QuantScheme& scheme, int threads,
                                       const std::function<void(const TensorReport&)>& on_tensor) {
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> in, GgufFile::open(in_path));
  // Quantizing is lossy: writing over the source would leave no way back to it.
  struct stat in_st {
  }, out_st{};
  if (::stat(in_path.c_str(), &in_st) == 0 && ::stat(out_path.c_str(), &out_st) == 0 &&
      in_st.st_dev == out_st.st_dev && in_st.st_ino == out_st.st_ino)
    return invalid_argument(out_path + ": is the input file; write the quantized model to another path");
  KVS_RETURN_IF_ERROR(GgufWriter::check_writable(out_path));  // before minutes of encoding
  const GgufFile& f = *in;
  for (const GgufTensorInfo& t : f.tensors())
    if (!is_supported_weight_type(t.type))
      return unsupported(in_path + ": tensor " + t.name + " has encoding " + ggml_type_name(t.type) +
                         ", which cannot be decoded");
  const std::string arch = f.get_string_or("general.architecture", "");
  const int n_layer = int(f.get_int_or(arch + ".block_count", 0));
  const bool tied = f.find_tensor("output.weight") == nullptr;

  GgufWriter w;
  for (const auto& [key, value] : f.metadata()) w.add_value(key, value);
  w.set_value("general.file_type", gguf_int_value(GgufValueType::UINT32, scheme.file_type));
  // set_value appends a key that was missing, so a file without general.file_type gains one.

  ThreadPool pool(threads);
  QuantizeStats stats;
  for (const GgufTensorInfo& t : f.tensors()) {
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const GgmlType to = pick_tensor_type(scheme, t.name, ne, n_layer, tied);
    const size_t src_row_bytes = t.row_bytes();
    const uint8_t* src = t.data;
    const GgmlType from = t.type;
    std::vector<uint8_t> data = encode_rows(pool, to, t.ne[0], t.nrows(), [&](int64_t r, float* dst) {
      dequantize_row(from, src + size_t(r) * src_row_bytes, dst, t.ne[0]);
    });
    stats.num_tensors++;
    stats.bytes_in += t.nbytes;
    stats.bytes_out += data.size();
    const uint64_t n_out = data.size();
    w.add_tensor(t.name, to, ne, std::move(data));
    if (on_tensor) on_tensor(TensorReport{t.name, ne, from, to, n_out});
  }
  KVS_RETURN_IF_ERROR(w.write_file(out_path));
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> check, GgufFile::open(out_path));
  stats.file_bytes = check->file_size();
  return stats;
}

}  // namespace kvserve

// Whole-model encodings ("quantization schemes") and the per-tensor type recipe shared by
// `kvserve quantize` (re-encode an existing GGUF) and `kvserve synth` (random weights).
//
// A scheme names the encoding of the big 2-D weight matrices; 1-D tensors (norms, biases, rope
// factors) always stay f32 because they are tiny and their precision matters most.
//
// Recipe (pick_tensor_type), per scheme:
//   f32 / f16 / bf16 : every 2-D matrix in that encoding.
//   q8_0             : every 2-D matrix q8_0.
//   q4_0 / q5_0      : every 2-D matrix in the base type, except the output projection (output.weight,
//                      or token_embd.weight when the model ties them), which gets q6_K: the logits are
//                      the most quantization-sensitive product of the model.
//   q6_k             : every 2-D matrix q6_K.
//   q4_k_m / q5_k_m  : q4_K (resp. q5_K) for most matrices; q6_K for the output projection and for
//                      attn_v and ffn_down of the "more bits" layers: the first eighth, the last eighth
//                      (both rounded up: e = ceil(n/8)) and every third layer in between (layer i
//                      with (i - e) % 3 == 2). Those are the
//                      layers whose errors propagate furthest, so about half of them get 6 bits.
// Fallbacks, because block formats need the inner dimension ne[0] to be a multiple of their block:
//   a k-quant (256 per block) on ne[0] % 256 != 0 becomes q5_0 for q4_K and q8_0 for q5_K/q6_K
//   (the next format at least as precise with 32-element blocks); a 32-block format on
//   ne[0] % 32 != 0 becomes f16. SmolLM's hidden size 576 = 2.25 * 256 hits the first rule: every
//   matrix whose input is the hidden state falls back (q4_K -> q5_0).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/types.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace kvserve {

struct QuantScheme {
  std::string name;       // "q4_k_m"
  GgmlType base;          // encoding of ordinary matrices
  uint32_t file_type;     // general.file_type (llama_ftype numbering)
  bool mixed_k = false;   // the _m recipe: q6_K for output and "more bits" attn_v / ffn_down
};

// Schemes `kvserve quantize` accepts: f32 f16 bf16 q8_0 q4_0 q5_0 q4_k_m q5_k_m q6_k
// (case-insensitive). invalid_argument naming the valid ones otherwise.
Expected<QuantScheme> parse_quant_scheme(const std::string& name);
std::vector<std::string> quant_scheme_names();

// Whether layer `layer` of `n_layer` gets q6_K for attn_v / ffn_down in the _m recipes.
bool use_more_bits(int layer, int n_layer);

// Encoding of one tensor under `scheme`. `name` is the GGUF tensor name, `ne` its shape
// (ne[0] inner), `n_layer` the model's block count, `tied_output` whether token_embd.weight
// doubles as the output projection (no output.weight in the model).
GgmlType pick_tensor_type(const QuantScheme& scheme, const std::string& name, const std::vector<int64_t>& ne,
                          int n_layer, bool tied_output);

// Layer index from "blk.N.xxx", or -1.
int tensor_layer_index(const std::string& name);

struct QuantizeStats {
  int64_t num_tensors = 0;
  uint64_t bytes_in = 0;   // tensor data read
  uint64_t bytes_out = 0;  // tensor data written
  uint64_t file_bytes = 0;  // size of the written file
};

// One line per tensor as it is written, e.g. for the CLI's progress output.
struct TensorReport {
  std::string name;
  std::vector<int64_t> ne;
  GgmlType from;
  GgmlType to;
  uint64_t bytes_out;
};

// Reads `in_path` (any encoding dequantize_row supports), writes `out_path` with the metadata
// unchanged except general.file_type, and every tensor re-encoded per pick_tensor_type.
// threads <= 0: one per core. on_tensor (optional) is called after each tensor.
Expected<QuantizeStats> quantize_model(const std::string& in_path, const std::string& out_path,
                                       const QuantScheme& scheme, int threads,
                                       const std::function<void(const TensorReport&)>& on_tensor = {});

// Encodes `rows` rows of `ne0` floats produced by `make_row(row, dst)` into `type`, in parallel
// on the pool's threads. Used by quantize (rows are dequantized source rows)
// and synth (rows are random). make_row must be safe to call concurrently for distinct rows.
std::vector<uint8_t> encode_rows(ThreadPool& pool, GgmlType type, int64_t ne0, int64_t rows,
                                 const std::function<void(int64_t row, float* dst)>& make_row);

}  // namespace kvserve

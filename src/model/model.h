// A loaded model: the mmapped GGUF file, its hyper-parameters and views of its weights.
// Weight matrices stay in the file's encoding; small 1-D tensors (norms, biases, rope factors) are
// converted to f32 vectors at load time. Where the active kernel table has a packed layout for a
// matrix (KernelTable::packed: Q8_0, Q5_0, Q4_0, Q4_K, Q5_K, Q6_K, F16, BF16, F32 on AVX-512 and
// AVX2), the matrix is repacked once at load into one buffer the model owns and the file's pages of
// it are released. KVSERVE_REPACK=0 in the environment turns repacking off.
// Once loaded, inference reads nothing from the file: what it still reads in the file's layout (the
// token embedding, matrices without a packed copy) is copied into a second buffer the model owns,
// since a file replaced in place (`cp` over it) or truncated under a running server would otherwise
// feed it another model's bytes or kill it with SIGBUS. Only the file layout of packed matrices
// (`WeightMatrix::data`, read by other kernel tables: tests) and the metadata stay in the mapping.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/matmul.h"
#include "model/hparams.h"
#include "util/status.h"

namespace kvserve {

struct LayerWeights {
  std::vector<float> attn_norm;  // [n_embd]
  WeightMatrix wq, wk, wv;       // [q_dim][n_embd], [kv_dim][n_embd], [kv_dim][n_embd]
  std::vector<float> bq, bk, bv;  // qwen2 biases [q_dim], [kv_dim], [kv_dim]; empty when absent
  WeightMatrix wo;               // [n_embd][q_dim]
  std::vector<float> ffn_norm;   // [n_embd]
  WeightMatrix w_gate, w_up;     // [n_ff][n_embd]
  WeightMatrix w_down;           // [n_embd][n_ff]
  // gate and up packed as one for the active kernel table (pack_weight_pair, kernels/matmul.h),
  // read by matmul_swiglu; packed null where they could not be paired (then w_gate and w_up are
  // packed, or read, on their own). Where it is set, w_gate and w_up have no packed copy of their
  // own and keep pointing at the file's rows.
  WeightMatrix w_gate_up{};
};

struct ModelWeights {
  WeightMatrix tok_embd;           // [n_vocab][n_embd]
  std::vector<float> output_norm;  // [n_embd]
  WeightMatrix output;             // [n_vocab][n_embd]; tok_embd when the model ties them
  bool tied_output = false;
  std::vector<float> rope_factors;  // Llama-3 rope_freqs.weight [rope_dim/2], empty if absent
  std::vector<LayerWeights> layers;
};

class Model {
 public:
  // Loads and validates: architecture, every tensor present with the expected shape, and every
  // weight encoding supported (an unsupported one names the tensor and its type).
  static Expected<std::unique_ptr<Model>> load(const std::string& path);

  const ModelHparams& hparams() const { return hp_; }
  const ModelWeights& weights() const { return w_; }
  const GgufFile& gguf() const { return *file_; }
  std::shared_ptr<GgufFile> gguf_ptr() const { return file_; }
  // Bytes of weight data read to decode one token (all matrices once + one embedding row).
  size_t weight_bytes() const;
  // Bytes of the repacked weight copies (0 when nothing was repacked).
  size_t packed_bytes() const { return packed_bytes_; }
  // Bytes of the file-layout weights copied out of the file (the embedding, unless tied to an
  // output matrix whose packed copy get_rows reads; unpacked matrices).
  size_t copied_bytes() const { return owned_bytes_; }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  void repack_weights();
  void copy_file_views();  // see the header comment

  std::shared_ptr<GgufFile> file_;
  ModelHparams hp_;
  ModelWeights w_;
  std::unique_ptr<uint8_t, FreeDeleter> packed_;  // the packed copies, back to back (64-byte aligned)
  size_t packed_bytes_ = 0;
  std::unique_ptr<uint8_t, FreeDeleter> owned_;  // copy_file_views' copies, back to back (64-byte aligned)
  size_t owned_bytes_ = 0;
};

}  // namespace kvserve

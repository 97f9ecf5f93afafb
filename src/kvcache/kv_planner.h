// KV memory planning: how much KV memory a model shape needs per token, per full-length
// sequence and per batch, how many blocks and concurrent sequences a budget holds, and what
// stays for weights and activations. Pure arithmetic over KvLayout (knows nothing of models):
// `kvserve plan` and `kvserve serve`'s start-up check fill the shape from a model file.
//
// Bytes per token = layers * kv_heads * (row_bytes(k_type, head_dim) + row_bytes(v_type, head_dim))
// (kv_dtype_row_bytes: 2 * layers * kv_heads * head_dim * elem bytes for one float type, plus the
// per-group scales of the quantized types). A sequence occupies whole blocks, so a full-length
// sequence of S tokens costs ceil(S / block_size) blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvcache/kv_layout.h"
#include "util/status.h"

namespace kvserve {

struct KvPlanInput {
  KvLayout layout;                // shape, K/V types, block size
  int64_t seq_len = 0;            // a full-length sequence, tokens (> 0)
  int64_t batch = 0;              // sequences the caller wants at once; 0: not asked
  uint64_t kv_budget_bytes = 0;   // KV memory; 0: exactly what `batch` (or one sequence) needs
  uint64_t available_bytes = 0;   // the machine's memory; 0: unknown (no fraction, no leftover)
  uint64_t weight_bytes = 0;      // model tensors; 0: unknown
};

struct KvPlan {
  size_t k_bytes_per_token_layer = 0;  // one token's K in one layer (all KV heads)
  size_t v_bytes_per_token_layer = 0;
  size_t bytes_per_token = 0;          // K + V, all layers
  size_t block_bytes = 0;
  int64_t blocks_per_sequence = 0;     // ceil(seq_len / block_size)
  uint64_t bytes_per_sequence = 0;     // blocks_per_sequence * block_bytes
  uint64_t batch_bytes_per_layer = 0;  // batch * seq_len tokens of K and V in one layer (batch > 0)
  uint64_t batch_bytes = 0;            // all layers (exact tokens, no block rounding)
  uint64_t kv_budget_bytes = 0;        // the budget used (input, or what batch/one sequence needs)
  int64_t num_blocks = 0;              // blocks in the budget
  int64_t max_sequences = 0;           // concurrent full-length sequences the budget holds
  double budget_fraction = 0;          // kv_budget / available (0 when available unknown)
  int64_t left_bytes = 0;              // available - kv_budget (may be negative)
  int64_t left_after_weights = 0;      // left_bytes - weight_bytes (activations, runtime)
  bool fits = false;                   // one full-length sequence (and `batch`, if given) fits
  // A given budget outside 50-70% of the available memory; weights not fitting beside it.
  std::vector<std::string> warnings;
  std::string error;                   // why !fits, with the figures
};

// The budget fraction the warnings recommend (the deployment guide's "50-70% for the KV cache").
inline constexpr double kKvBudgetFractionLow = 0.5;
inline constexpr double kKvBudgetFractionHigh = 0.7;

// Computes the plan. Errors only for invalid input (bad layout, seq_len <= 0, negative batch);
// a budget too small is a plan with fits == false and `error` set.
Expected<KvPlan> plan_kv(const KvPlanInput& in);

// "256 MiB" in the largest unit it reaches: an integer when exact, else two decimals.
std::string format_plan_bytes(uint64_t bytes);

}  // namespace kvserve

#include "kvcache/kv_planner.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "util/units.h"

namespace kvserve {

std::string format_plan_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  uint64_t unit = 1;
  while (u < 4 && bytes >= unit * 1024) {
    unit *= 1024;
    ++u;
  }
  if (bytes % unit == 0) return std::to_string(bytes / unit) + " " + kUnits[u];
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", double(bytes) / double(unit), kUnits[u]);
  return buf;
}

namespace {

// a * b, saturating at UINT64_MAX (budgets of absurd shapes must not wrap to small numbers).
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

}  // namespace

Expected<KvPlan> plan_kv(const KvPlanInput& in) {
  KVS_RETURN_IF_ERROR(in.layout.validate());
  if (in.seq_len <= 0) return invalid_argument("sequence length must be > 0, got " + std::to_string(in.seq_len));
  if (in.batch < 0) return invalid_argument("batch must be >= 0, got " + std::to_string(in.batch));
  const KvLayout& L = in.layout;
  KvPlan p;
  p.k_bytes_per_token_layer = L.slot_bytes(KvPart::kKey);
  p.v_bytes_per_token_layer = L.slot_bytes(KvPart::kValue);
  p.bytes_per_token = L.bytes_per_token();
  p.block_bytes = L.block_bytes();
  p.blocks_per_sequence = (in.seq_len + L.block_size - 1) / L.block_size;
  p.bytes_per_sequence = mul_sat(uint64_t(p.blocks_per_sequence), p.block_bytes);
  if (in.batch > 0) {
    uint64_t tokens = mul_sat(uint64_t(in.batch), uint64_t(in.seq_len));
    p.batch_bytes_per_layer = mul_sat(tokens, p.k_bytes_per_token_layer + p.v_bytes_per_token_layer);
    p.batch_bytes = mul_sat(tokens, p.bytes_per_token);
  }
  // Without a budget, plan exactly what was asked for: the batch in whole blocks, or one sequence.
  p.kv_budget_bytes = in.kv_budget_bytes > 0 ? in.kv_budget_bytes
                                             : mul_sat(p.bytes_per_sequence, uint64_t(in.batch > 0 ? in.batch : 1));
  p.num_blocks = int64_t(p.kv_budget_bytes / p.block_bytes);
  p.max_sequences = p.num_blocks / p.blocks_per_sequence;

  if (in.available_bytes > 0) {
    p.budget_fraction = double(p.kv_budget_bytes) / double(in.available_bytes);
    p.left_bytes = int64_t(in.available_bytes) - int64_t(std::min<uint64_t>(p.kv_budget_bytes, INT64_MAX));
    p.left_after_weights = p.left_bytes - int64_t(in.weight_bytes);
    if (in.kv_budget_bytes > 0 &&
        (p.budget_fraction < kKvBudgetFractionLow || p.budget_fraction > kKvBudgetFractionHigh)) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "the KV budget is %.1f%% of the available memory (%s); the guide reserves 50-70%%",
                    100.0 * p.budget_fraction, format_plan_bytes(in.available_bytes).c_str());
      p.warnings.push_back(buf);
    }
    if (in.weight_bytes > 0 && p.left_after_weights < 0)
      p.warnings.push_back("the weights (" + format_plan_bytes(in.weight_bytes) + ") do not fit in the " +
                           format_plan_bytes(uint64_t(std::max<int64_t>(p.left_bytes, 0))) +
                           " left beside the KV budget");
  }

  const std::string budget = format_plan_bytes(p.kv_budget_bytes);
  if (p.max_sequences < 1) {
    p.error = "one full-length sequence of " + std::to_string(in.seq_len) + " tokens needs " +
              std::to_string(p.blocks_per_sequence) + " blocks (" + format_plan_bytes(p.bytes_per_sequence) + ", " +
              std::to_string(p.bytes_per_token) + " bytes per token) but the KV budget of " + budget + " holds " +
              std::to_string(p.num_blocks) + " blocks of " + format_plan_bytes(p.block_bytes);
  } else if (in.batch > 0 && p.max_sequences < in.batch) {
    p.error = "a batch of " + std::to_string(in.batch) + " sequences of " + std::to_string(in.seq_len) +
              " tokens needs " + format_plan_bytes(mul_sat(p.bytes_per_sequence, uint64_t(in.batch))) +
              " but the KV budget of " + budget + " holds " + std::to_string(p.max_sequences) + " of them";
  }
  p.fits = p.error.empty();
  return p;
}

}  // namespace kvserve

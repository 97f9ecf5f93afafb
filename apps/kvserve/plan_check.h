// The KV memory check `kvserve plan` prints and `kvserve serve` runs before it starts: does one
// full-length sequence (the context) fit in the configured KV budget? (kvcache/kv_planner.h)
#pragma once

#include <string>

#include "kvcache/kv_planner.h"
#include "server/config.h"
#include "util/status.h"

namespace kvserve::cli {

// What a model file contributes to a plan.
struct ModelKvShape {
  std::string name;    // general.name, else the file name
  std::string arch;
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t context_length = 0;  // <arch>.context_length
  uint64_t weight_bytes = 0;   // every tensor's bytes in the file
};

// Reads the shape from the GGUF metadata (no weights are loaded).
Expected<ModelKvShape> read_model_kv_shape(const std::string& path);

// serve's start-up check: when kv_memory is set, one sequence of the context (ctx, else the
// model's) must fit in it. Returns 0, or prints the planner's figures and returns 1.
int check_serve_plan(const server::ServerConfig& cfg);

}  // namespace kvserve::cli

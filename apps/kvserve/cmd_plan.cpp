// kvserve plan: KV memory per token, per full-length sequence and per batch; blocks and
// concurrent sequences in a budget; what is left for weights and activations. From a model
// file (-m) or from a shape given by flags (--layers/--kv-heads/--head-dim/--seq-len).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "plan_check.h"
#include "util/memory_info.h"
#include "util/units.h"

namespace kvserve::cli {

Expected<ModelKvShape> read_model_kv_shape(const std::string& path) {
  KVS_ASSIGN_OR_RETURN(std::shared_ptr<GgufFile> f, GgufFile::open(path));
  KVS_ASSIGN_OR_RETURN(ModelHparams hp, load_hparams(*f));
  ModelKvShape s;
  s.name = hp.name.empty() ? std::filesystem::path(path).filename().string() : hp.name;
  s.arch = hp.arch;
  s.num_layers = hp.n_layer;
  s.num_kv_heads = hp.n_head_kv;
  s.head_dim = hp.head_dim;
  s.context_length = hp.n_ctx_train;
  for (const GgufTensorInfo& t : f->tensors()) s.weight_bytes += t.nbytes;
  return s;
}

namespace {

// K and V types from --kv-type and the optional --kv-type-k/--kv-type-v overrides.
Status resolve_kv_types(const std::string& both, const std::string& k, const std::string& v, KvLayout* l) {
  KVS_ASSIGN_OR_RETURN(KvDType t, parse_kv_dtype(both));
  l->k_dtype = l->v_dtype = t;
  if (!k.empty()) {
    KVS_ASSIGN_OR_RETURN(l->k_dtype, parse_kv_dtype(k));
  }
  if (!v.empty()) {
    KVS_ASSIGN_OR_RETURN(l->v_dtype, parse_kv_dtype(v));
  }
  return Status::ok_status();
}

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100.0 * f);
  return b;
}

// "1.25 KiB (1280 bytes)": the exact count next to the readable one.
std::string bytes_and_exact(uint64_t b) {
  std::string r = format_plan_bytes(b);
  if (b >= 1024) r += " (" + std::to_string(b) + " bytes)";
  return r;
}

std::string signed_bytes(int64_t b) { return b < 0 ? "-" + format_plan_bytes(uint64_t(-b)) : format_plan_bytes(uint64_t(b)); }

}  // namespace

int check_serve_plan(const server::ServerConfig& cfg) {
  if (cfg.kv_memory.empty()) return 0;  // the engine sizes the cache for the context itself
  auto shape = read_model_kv_shape(cfg.model);
  if (!shape.ok()) return 0;  // the engine's load reports the file's problem with more context
  KvPlanInput in;
  in.layout.num_layers = shape->num_layers;
  in.layout.num_kv_heads = shape->num_kv_heads;
  in.layout.head_dim = shape->head_dim;
  in.layout.block_size = cfg.block_size;
  Status st = resolve_kv_types(cfg.kv_type, cfg.kv_type_k, cfg.kv_type_v, &in.layout);
  if (!st.ok()) return 0;  // validated (and reported) by the config loader and the engine
  auto budget = parse_memory_budget(cfg.kv_memory);
  if (!budget.ok()) return 0;
  in.kv_budget_bytes = *budget;
  in.seq_len = cfg.ctx > 0 ? cfg.ctx : shape->context_length;
  // A sliding window bounds what one sequence holds: the window plus one prefill chunk and a
  // partly filled block at each end, whatever the context.
  if (cfg.attention_window > 0)
    in.seq_len = std::min<int64_t>(in.seq_len, cfg.attention_window + cfg.max_batched_tokens + 2 * cfg.block_size);
  auto p = plan_kv(in);
  if (!p.ok() || p->fits) return 0;
  int64_t max_ctx = p->num_blocks * in.layout.block_size;
  std::fprintf(stderr,
               "error: kv_memory %s is too small: %s. KV per token: %zu bytes (%s); "
               "lower --ctx to at most %lld or raise --kv-memory to at least %s (see kvserve plan)\n",
               cfg.kv_memory.c_str(), p->error.c_str(), p->bytes_per_token, in.layout.type_signature().c_str(),
               (long long)max_ctx, format_plan_bytes(p->bytes_per_sequence).c_str());
  return 1;
}

Runner add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "plan KV cache memory: per token, per sequence, blocks, concurrent sequences");
  struct Opts {
    std::string model;
    std::string memory;
    double memory_fraction = 0;
    std::string available;
    int64_t ctx = 0;
    int64_t seq_len = 0;
    int64_t batch = 0;
    std::string kv_type = "f32";
    std::string kv_type_k, kv_type_v;
    int block_size = 16;
    int layers = 0, kv_heads = 0, head_dim = 0;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model file (its shape, context and weight bytes)");
  auto* mem = cmd->add_option("--memory", o->memory, "KV budget in bytes (8GiB, 512MiB)");
  auto* frac = cmd->add_option("--memory-fraction", o->memory_fraction, "KV budget as a fraction of the available memory");
  mem->excludes(frac);
  cmd->add_option("--available", o->available, "the machine's memory (default: physical RAM)");
  cmd->add_option("--ctx", o->ctx, "full-length sequence in tokens (default: the model's context)");
  cmd->add_option("--seq-len", o->seq_len, "same as --ctx (for shapes given by flags)");
  cmd->add_option("--batch", o->batch, "sequences wanted at once (reports the batch's KV bytes per layer)");
  cmd->add_option("--kv-type", o->kv_type, "K and V type: f32, f16, bf16, q8_0, q4_0")->capture_default_str();
  cmd->add_option("--kv-type-k", o->kv_type_k, "K type (overrides --kv-type)");
  cmd->add_option("--kv-type-v", o->kv_type_v, "V type (overrides --kv-type)");
  cmd->add_option("--block-size", o->block_size, "tokens per KV block")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layers (without -m)");
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads (without -m)");
  cmd->add_option("--head-dim", o->head_dim, "head dimension (without -m)");
  cmd->add_flag("--json", o->json, "print one JSON object");

  return [o]() -> int {
    auto fail = [](const std::string& msg, int code) {
      std::fprintf(stderr, "error: %s\n", msg.c_str());
      return code;
    };
    KvPlanInput in;
    ModelKvShape shape;
    if (!o->model.empty()) {
      auto s = read_model_kv_shape(o->model);
      if (!s.ok()) return fail(s.status().message(), 1);
      shape = *s;
    } else {
      if (o->layers <= 0 || o->kv_heads <= 0 || o->head_dim <= 0)
        return fail("give -m MODEL, or --layers, --kv-heads and --head-dim (all > 0)", 2);
      shape.num_layers = o->layers;
      shape.num_kv_heads = o->kv_heads;
      shape.head_dim = o->head_dim;
    }
    // Flags override the model's shape (what-if planning).
    if (o->layers > 0) shape.num_layers = o->layers;
    if (o->kv_heads > 0) shape.num_kv_heads = o->kv_heads;
    if (o->head_dim > 0) shape.head_dim = o->head_dim;
    if (o->ctx < 0 || o->seq_len < 0 || o->batch < 0) return fail("--ctx, --seq-len and --batch must not be negative", 2);
    if (o->ctx > 0 && o->seq_len > 0 && o->ctx != o->seq_len) return fail("--ctx and --seq-len disagree", 2);
    in.seq_len = o->ctx > 0 ? o->ctx : o->seq_len > 0 ? o->seq_len : shape.context_length;
    if (in.seq_len <= 0) return fail("give --seq-len (or --ctx): no model context to default to", 2);
    if (o->block_size <= 0 || o->block_size > 4096) return fail("--block-size must be in 1..4096", 2);
    in.layout.num_layers = shape.num_layers;
    in.layout.num_kv_heads = shape.num_kv_heads;
    in.layout.head_dim = shape.head_dim;
    in.layout.block_size = o->block_size;
    Status st = resolve_kv_types(o->kv_type, o->kv_type_k, o->kv_type_v, &in.layout);
    if (!st.ok()) return fail(st.message(), 2);
    in.batch = o->batch;
    in.weight_bytes = shape.weight_bytes;

    // Available memory: given, else physical RAM (or the cgroup's limit when lower). The budget:
    // --memory, a fraction of the available memory, or (neither) exactly what the batch / one
    // sequence needs.
    in.available_bytes = memory_limit_bytes();
    if (!o->available.empty()) {
      auto a = parse_bytes(o->available);
      if (!a.ok() || *a == 0) return fail("--available: expected a size such as 16GiB", 2);
      in.available_bytes = *a;
    }
    if (!o->memory.empty()) {
      auto m = parse_bytes(o->memory);
      if (!m.ok() || *m == 0) return fail("--memory: expected a size such as 8GiB", 2);
      in.kv_budget_bytes = *m;
    } else if (o->memory_fraction != 0) {
      if (!(o->memory_fraction > 0 && o->memory_fraction <= 1)) return fail("--memory-fraction must be in (0, 1]", 2);
      in.kv_budget_bytes = uint64_t(o->memory_fraction * double(in.available_bytes));
    }
    auto p = plan_kv(in);
    if (!p.ok()) return fail(p.status().message(), 2);

    const KvLayout& L = in.layout;
    if (o->json) {
      nlohmann::json j;
      if (!o->model.empty())
        j["model"] = {{"path", o->model}, {"name", shape.name}, {"arch", shape.arch},
                      {"context_length", shape.context_length}, {"weight_bytes", shape.weight_bytes}};
      j["shape"] = {{"layers", L.num_layers}, {"kv_heads", L.num_kv_heads}, {"head_dim", L.head_dim},
                    {"block_size", L.block_size}, {"kv_type_k", kv_dtype_name(L.k_dtype)},
                    {"kv_type_v", kv_dtype_name(L.v_dtype)}};
      j["seq_len"] = in.seq_len;
      j["bytes_per_token"] = p->bytes_per_token;
      j["bytes_per_token_per_layer"] = {{"k", p->k_bytes_per_token_layer}, {"v", p->v_bytes_per_token_layer}};
      j["block_bytes"] = p->block_bytes;
      j["blocks_per_sequence"] = p->blocks_per_sequence;
      j["bytes_per_sequence"] = p->bytes_per_sequence;
      if (in.batch > 0)
        j["batch"] = {{"sequences", in.batch}, {"bytes_per_layer", p->batch_bytes_per_layer}, {"bytes", p->batch_bytes}};
      j["kv_budget_bytes"] = p->kv_budget_bytes;
      j["available_bytes"] = in.available_bytes;
      j["budget_fraction"] = p->budget_fraction;
      j["num_blocks"] = p->num_blocks;
      j["max_sequences"] = p->max_sequences;
      j["left_bytes"] = p->left_bytes;
      j["left_after_weights_bytes"] = p->left_after_weights;
      j["fits"] = p->fits;
      j["warnings"] = p->warnings;
      if (!p->fits) j["error"] = p->error;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      if (!o->model.empty())
        std::printf("model:                %s (%s), context %lld tokens, weights %s\n", shape.name.c_str(),
                    shape.arch.c_str(), (long long)shape.context_length, format_plan_bytes(shape.weight_bytes).c_str());
      std::printf("shape:                %d layers x %d KV heads x %d head dim, K %s, V %s, %d-token blocks\n",
                  L.num_layers, L.num_kv_heads, L.head_dim, kv_dtype_name(L.k_dtype), kv_dtype_name(L.v_dtype),
                  L.block_size);
      std::printf("KV per token:         %s (per layer: K %zu + V %zu bytes)\n",
                  bytes_and_exact(p->bytes_per_token).c_str(), p->k_bytes_per_token_layer, p->v_bytes_per_token_layer);
      std::printf("full-length sequence: %lld tokens = %lld blocks = %s\n", (long long)in.seq_len,
                  (long long)p->blocks_per_sequence, bytes_and_exact(p->bytes_per_sequence).c_str());
      if (in.batch > 0)
        std::printf("batch %lld x %lld tokens: %s per layer for K and V together, %s for %d layer%s\n",
                    (long long)in.batch, (long long)in.seq_len, format_plan_bytes(p->batch_bytes_per_layer).c_str(),
                    format_plan_bytes(p->batch_bytes).c_str(), L.num_layers, L.num_layers == 1 ? "" : "s");
      std::printf("KV budget:            %s = %s of %s available%s\n", bytes_and_exact(p->kv_budget_bytes).c_str(),
                  pct(p->budget_fraction).c_str(), format_plan_bytes(in.available_bytes).c_str(),
                  o->memory.empty() && o->memory_fraction == 0 ? " (no --memory: what the plan needs)" : "");
      std::printf("blocks:               %lld of %s\n", (long long)p->num_blocks, format_plan_bytes(p->block_bytes).c_str());
      std::printf("max concurrent full-length sequences: %lld\n", (long long)p->max_sequences);
      std::printf("left for weights and activations: %s", signed_bytes(p->left_bytes).c_str());
      if (shape.weight_bytes > 0)
        std::printf(" (weights %s, then %s for activations and the runtime)", format_plan_bytes(shape.weight_bytes).c_str(),
                    signed_bytes(p->left_after_weights).c_str());
      std::printf("\n");
    }
    for (const std::string& w : p->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!p->fits) return fail(p->error, 1);
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_plan, 95);

}  // namespace kvserve::cli

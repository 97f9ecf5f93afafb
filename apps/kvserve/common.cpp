#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <tuple>

#include "commands.h"

namespace kvserve::cli {
namespace {
std::vector<std::pair<int, CommandFactory>>& registry() {
  static std::vector<std::pair<int, CommandFactory>> r;  // function-local: safe from init order
  return r;
}
}  // namespace

bool register_command(CommandFactory factory, int order) {
  registry().emplace_back(order, factory);
  return true;
}

std::vector<CommandFactory> registered_commands() {
  auto r = registry();
  std::stable_sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<CommandFactory> out;
  for (auto& [order, f] : r) out.push_back(f);
  return out;
}

namespace {
// CLI11's NonNegativeNumber names the largest double in its message; this one says it plainly.
const CLI::Validator kNonNegative(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || v < 0)
        return "must be a non-negative integer, got '" + text + "'";
      return "";
    },
    "NONNEGATIVE");
}  // namespace

void add_threads_flag(CLI::App* cmd, int* threads, const std::string& help) {
  cmd->add_option("-t,--threads", *threads, help)->check(CLI::Range(0, kMaxThreads));
}

void add_block_size_flag(CLI::App* cmd, int* block_size) {
  cmd->add_option("--block-size", *block_size, "tokens per KV block")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
}

void add_engine_flags(CLI::App* cmd, EngineFlags* f, bool with_cache_switch) {
  cmd->add_option("-m,--model", f->model, "GGUF model file")->required();
  cmd->add_option("--kv-type", f->kv_type, "KV cache element type of K and V: f32, f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  cmd->add_option("--kv-type-k", f->kv_type_k, "K cache element type (overrides --kv-type)");
  cmd->add_option("--kv-type-v", f->kv_type_v, "V cache element type (overrides --kv-type)");
  cmd->add_option("--kv-memory", f->kv_memory, "KV cache budget: bytes (512MiB) or a fraction of RAM (0.6)");
  cmd->add_option("--ctx", f->ctx, "context length in tokens (default: the model's)")->check(kNonNegative);
  add_block_size_flag(cmd, &f->block_size);
  add_threads_flag(cmd, &f->threads, "worker threads (default: one per core)");
  if (with_cache_switch)
    cmd->add_flag("--no-cache", f->no_cache, "recompute the whole sequence at every step (use_cache=False)");
}

void add_context_flags(CLI::App* cmd, EngineFlags* f) {
  cmd->add_option("--context-overflow", f->overflow,
                  "at the context end: error (stop; a longer prompt fails), truncate (drop the oldest prompt "
                  "tokens after BOS) or shift (keep --n-keep sink tokens, drop half of the rest, go on)")
      ->capture_default_str();
  cmd->add_option("--n-keep", f->n_keep, "tokens a context shift keeps at the start (attention sinks)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("--attention-window", f->attention_window,
                  "sliding attention window in tokens (0: the model's own, else none)")
      ->capture_default_str()
      ->check(kNonNegative);
}

std::unique_ptr<Generator> make_generator(const EngineFlags& f, int64_t max_tokens_held) {
  GeneratorOptions o;
  o.model_path = f.model;
  auto kv = parse_kv_dtype(f.kv_type);
  if (!kv.ok()) {
    std::fprintf(stderr, "error: --kv-type: %s\n", kv.status().message().c_str());
    return nullptr;
  }
  for (auto [text, flag, field] : {std::tuple{&f.kv_type_k, "--kv-type-k", &o.kv_type_k},
                                   std::tuple{&f.kv_type_v, "--kv-type-v", &o.kv_type_v}}) {
    if (text->empty()) continue;
    auto t = parse_kv_dtype(*text);
    if (!t.ok()) {
      std::fprintf(stderr, "error: %s: %s\n", flag, t.status().message().c_str());
      return nullptr;
    }
    *field = *t;
  }
  o.kv_type = *kv;
  o.kv_memory = f.kv_memory;
  o.ctx = f.ctx;
  o.block_size = f.block_size;
  o.threads = f.threads;
  o.use_cache = !f.no_cache;
  auto overflow = parse_context_overflow(f.overflow);
  if (!overflow.ok()) {
    std::fprintf(stderr, "error: --context-overflow: %s\n", overflow.status().message().c_str());
    return nullptr;
  }
  o.context_overflow = *overflow;
  o.n_keep = f.n_keep;
  o.attention_window = f.attention_window;
  o.max_tokens_held = max_tokens_held;
  auto g = Generator::create(o);
  if (!g.ok()) {
    std::fprintf(stderr, "error: %s\n", g.status().message().c_str());
    return nullptr;
  }
  return std::move(g).value();
}

bool parse_token_list(const std::string& text, std::vector<int32_t>* out) {
  out->clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    try {
      long v = std::stol(item, &pos);
      if (pos != item.size() || v < 0 || v > INT32_MAX) return false;
      out->push_back(int32_t(v));
    } catch (...) {
      return false;
    }
  }
  return !out->empty();
}

}  // namespace kvserve::cli

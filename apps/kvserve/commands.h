// Subcommands of the one `kvserve` binary. Each registers its flags on the CLI11 app and
// returns a callback-free handle; main() runs the one that was selected.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "engine/generator.h"
#include "util/thread_pool.h"

namespace kvserve::cli {

// The command to run after parsing; returns the process exit code.
using Runner = std::function<int()>;
// Creates one subcommand on `app` (app.add_subcommand(...)) and returns what runs it.
using CommandFactory = Runner (*)(CLI::App& app);

// Each cmd_*.cpp registers its factory at static-initialisation time:
//   KVS_REGISTER_COMMAND(add_generate);
// `order` sorts the help listing (lower first).
bool register_command(CommandFactory factory, int order);
// All registered factories, sorted by order.
std::vector<CommandFactory> registered_commands();
#define KVS_REGISTER_COMMAND(factory, order) \
  static const bool kvs_registered_##factory = ::kvserve::cli::register_command(&factory, order)

// Flags shared by every command that loads a model for inference.
struct EngineFlags {
  std::string model;
  std::string kv_type = "f32";  // K and V
  std::string kv_type_k;        // "" = kv_type
  std::string kv_type_v;        // "" = kv_type
  std::string kv_memory;
  int64_t ctx = 0;
  int block_size = 16;
  int threads = 0;
  bool no_cache = false;
  // add_context_flags():
  std::string overflow = "error";  // --context-overflow
  int64_t n_keep = 4;              // --n-keep
  int64_t attention_window = 0;    // --attention-window
};
void add_engine_flags(CLI::App* cmd, EngineFlags* f, bool with_cache_switch);
// -t/--threads, checked against 0..kMaxThreads, and --block-size, 1..4096 (out of range: exit 2).
void add_threads_flag(CLI::App* cmd, int* threads, const std::string& help);
void add_block_size_flag(CLI::App* cmd, int* block_size);
// --context-overflow, --n-keep and --attention-window (generate, perplexity, logits).
void add_context_flags(CLI::App* cmd, EngineFlags* f);
// Builds the generator; prints the error and returns nullptr on failure.
// max_tokens_held > 0: the most tokens the run can hold at once (GeneratorOptions).
std::unique_ptr<Generator> make_generator(const EngineFlags& f, int64_t max_tokens_held = 0);

// "1,2,3" -> ids; false on a malformed list.
bool parse_token_list(const std::string& text, std::vector<int32_t>* out);

}  // namespace kvserve::cli

// Subcommands of the one `kvserve` binary. Each registers its flags on the CLI11 app and
// returns a callback-free handle; main() runs the one that was selected.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "engine/generator.h"

namespace kvserve::cli {

// The command to run after parsing; returns the process exit code.
using Runner = std::function<int()>;

Runner add_generate(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_perplexity(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_inspect(CLI::App& app);

// Flags shared by every command that loads a model for inference.
struct EngineFlags {
  std::string model;
  std::string kv_type = "f32";
  std::string kv_memory;
  int64_t ctx = 0;
  int block_size = 16;
  int threads = 0;
  bool no_cache = false;
};
void add_engine_flags(CLI::App* cmd, EngineFlags* f, bool with_cache_switch);
// Builds the generator; prints the error and returns nullptr on failure.
std::unique_ptr<Generator> make_generator(const EngineFlags& f);

// "1,2,3" -> ids; false on a malformed list.
bool parse_token_list(const std::string& text, std::vector<int32_t>* out);

}  // namespace kvserve::cli

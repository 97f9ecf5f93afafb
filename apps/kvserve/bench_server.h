// `kvserve bench --server URL ...`: the load-generator mode of `kvserve bench`
// (src/server/load_generator.h does the work; this file maps the flags).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace kvserve::cli {

struct ServerBenchFlags {
  std::string server;                  // URL; non-empty selects this mode
  std::string concurrency = "1,4,8,16";
  int requests = 0;
  int prompt_words = 100;
  int shared_prefix_words = 0;
  int suffix_words = 20;
  int turns = 0;
  uint64_t seed = 1;
  double timeout = 600;
  std::string model_field;
  std::string api_key;  // --api-key, else $KVSERVE_API_KEY
};

void add_server_bench_flags(CLI::App* cmd, ServerBenchFlags* f);
// `gen_tokens`: --gen (max_tokens per request). Prints the table or JSON; returns the exit
// code (0, 1 when every request of a level failed, 2 for bad flags).
int run_server_bench(const ServerBenchFlags& f, int64_t gen_tokens, bool json);

}  // namespace kvserve::cli

#include "bench_server.h"

#include <cstdlib>
#include <cstdio>

#include "commands.h"
#include "server/load_generator.h"

namespace kvserve::cli {

void add_server_bench_flags(CLI::App* cmd, ServerBenchFlags* f) {
  cmd->add_option("--server", f->server, "load-generator mode: drive a running server at this URL (http://host:port)");
  cmd->add_option("--concurrency", f->concurrency, "--server: comma-separated client counts")->capture_default_str();
  cmd->add_option("--requests", f->requests, "--server: requests per level (default 4 x concurrency, at least 8)");
  cmd->add_option("--prompt-words", f->prompt_words, "--server: words per prompt (per user message with --turns)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix-words", f->shared_prefix_words,
                  "--server: every prompt = this shared prefix + a unique suffix (prefix-cache workload)");
  cmd->add_option("--suffix-words", f->suffix_words, "--server: words of the unique suffix")->capture_default_str();
  cmd->add_option("--turns", f->turns, "--server: multi-turn chats of this many turns (one chat per client)");
  cmd->add_option("--seed", f->seed, "--server: prompt generator seed")->capture_default_str();
  cmd->add_option("--timeout", f->timeout, "--server: seconds per request")->capture_default_str();
  cmd->add_option("--model-name", f->model_field, "--server: the request's \"model\" field (default: none)");
  cmd->add_option("--api-key", f->api_key, "--server: the server's API key (default: $KVSERVE_API_KEY)");
}

int run_server_bench(const ServerBenchFlags& f, int64_t gen_tokens, bool json) {
  loadgen::LoadGenOptions o;
  o.url = f.server;
  o.api_key = f.api_key;
  if (o.api_key.empty())
    if (const char* env = std::getenv("KVSERVE_API_KEY")) o.api_key = env;
  std::vector<int32_t> levels;
  if (!parse_token_list(f.concurrency, &levels)) {
    std::fprintf(stderr, "error: --concurrency must be a comma-separated list of positive integers\n");
    return 2;
  }
  o.concurrency.assign(levels.begin(), levels.end());
  o.requests = f.requests;
  o.prompt_words = f.prompt_words;
  o.gen_tokens = int(gen_tokens);
  o.shared_prefix_words = f.shared_prefix_words;
  o.suffix_words = f.suffix_words;
  o.turns = f.turns;
  o.seed = f.seed;
  o.timeout_seconds = f.timeout;
  o.model = f.model_field;
  if (!json) std::fprintf(stderr, "load-testing %s ...\n", o.url.c_str());
  auto r = loadgen::run_load(o);
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", r.status().message().c_str());
    return 2;
  }
  if (json)
    std::printf("%s\n", loadgen::report_json(*r).dump(2).c_str());
  else
    std::fputs(loadgen::report_table(*r).c_str(), stdout);
  for (const auto& L : r->levels)
    if (L.requests > 0 && L.errors == L.requests) {
      std::fprintf(stderr, "error: every request at concurrency %d failed: %s\n", L.concurrency, L.first_error.c_str());
      return 1;
    }
  return 0;
}

}  // namespace kvserve::cli

// kvserve serve: the HTTP server. Flags, KVSERVE_* variables and a YAML file all map onto
// the keys of server/config.h (precedence: flags > environment > file > defaults).
#include <cstdio>
#include <map>
#include <memory>

#include "commands.h"
#include "plan_check.h"
#include "server/config.h"
#include "server/http_server.h"
#include "util/log.h"

namespace kvserve::cli {

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "serve the model over HTTP (native and OpenAI-compatible API)");
  struct Opts {
    std::string config_file;
    bool print_config = false;
    bool no_cache = false;
    std::map<std::string, std::string> values;  // key -> flag text, only for flags given
  };
  auto o = std::make_shared<Opts>();
  // Each value flag is kept as text and validated by the config loader, so a flag, an
  // environment variable and a file entry are checked by the same code and messages.
  struct FlagSpec {
    const char* names;
    const char* key;
    const char* help;
  };
  static const FlagSpec kFlags[] = {
      {"-m,--model", "model", "GGUF model file"},
      {"--host", "host", "address to listen on (default 127.0.0.1)"},
      {"--port", "port", "TCP port (default 8080; 0 picks a free one)"},
      {"--kv-type", "kv_type", "KV cache element type of K and V: f32, f16, bf16, q8_0 or q4_0"},
      {"--kv-type-k", "kv_type_k", "K cache element type (overrides --kv-type)"},
      {"--kv-type-v", "kv_type_v", "V cache element type (overrides --kv-type)"},
      {"--kv-memory", "kv_memory", "KV cache budget: bytes (512MiB) or a fraction of RAM (0.6)"},
      {"--ctx", "ctx", "context length in tokens (default: the model's)"},
      {"--block-size", "block_size", "tokens per KV block (default 16)"},
      {"--max-seqs", "max_seqs", "sequences running at once (default 16)"},
      {"--max-batched-tokens", "max_batched_tokens", "tokens per forward pass (default 512)"},
      {"--max-queue", "max_queue", "requests waiting before 429 (default 64)"},
      {"--request-timeout", "request_timeout", "seconds per request, 0 = none (default 600)"},
      {"--max-body-bytes", "max_body_bytes", "request body limit (default 1MiB)"},
      {"--max-tokens-limit", "max_tokens_limit", "largest max_tokens accepted (default 4096)"},
      {"--context-overflow", "context_overflow",
       "prompt + max_tokens beyond the context: error (400), truncate (drop the oldest prompt tokens) or "
       "shift "
       "(keep --n-keep sink tokens, drop half of the rest, generate on)"},
      {"--n-keep", "n_keep", "tokens a context shift keeps at the start (default 4)"},
      {"--attention-window", "attention_window",
       "sliding attention window in tokens (default 0: the model's own, else none)"},
      {"--prefix-cache", "prefix_cache", "share KV blocks of common prompt prefixes: on or off (default on)"},
      {"--cache-pin-fraction", "cache_pin_fraction", "share of KV blocks /cache/pin may hold (default 0.2)"},
      {"--log-format", "log_format", "text or json (default text)"},
      {"--log-level", "log_level", "debug, info, warn, error, off (default info)"},
      {"-t,--threads", "threads", "engine worker threads (default: one per core)"},
      {"--chat-template", "chat_template",
       "chatml, llama2, llama3, mistral, zephyr, phi3, plain (default: detect)"},
      {"--served-model-name", "served_model_name",
       "the model id clients see (default: the model's general.name)"},
      {"--http-threads", "http_threads", "HTTP handler threads (default max(256, max-seqs + max-queue + 4))"},
      {"--shutdown-timeout", "shutdown_timeout", "seconds to drain on SIGTERM (default 10)"},
      {"--api-key", "api_key",
       "require \"Authorization: Bearer KEY\" (prefer KVSERVE_API_KEY or --api-key-file: flags show in ps)"},
      {"--api-key-file", "api_key_file", "file whose first line is the API key"},
      {"--cors-origins", "cors_origins",
       "browser origins allowed to call (\"*\" or a comma list; default none)"},
  };
  for (const auto& f : kFlags) {
    std::string key = f.key;
    cmd->add_option_function<std::string>(
        f.names, [o, key](const std::string& v) { o->values[key] = v; }, f.help);
  }
  cmd->add_option("--config", o->config_file, "YAML file of configuration keys (see docs/configuration.md)");
  cmd->add_flag("--print-config", o->print_config, "print the effective configuration as YAML and exit");
  cmd->add_flag("--no-cache", o->no_cache, "recompute every sequence at each step (use_cache=False)");

  return [o]() -> int {
    server::ConfigSources src;
    src.file_path = o->config_file;
    src.env = server::kvserve_environment();
    src.flags = o->values;
    if (o->no_cache) src.flags["no_cache"] = "true";
    auto cfg = server::load_server_config(src);
    if (!cfg.ok()) {
      std::fprintf(stderr, "error: %s\n", cfg.status().message().c_str());
      return 2;
    }
    if (o->print_config) {
      std::fputs(server::config_to_yaml(*cfg).c_str(), stdout);
      return 0;
    }
    if (int rc = check_serve_plan(*cfg); rc != 0) return rc;  // cmd_plan.cpp: the KV budget holds the context
    LogLevel lvl = LogLevel::kInfo;
    parse_log_level(cfg->log_level, &lvl);  // validated by the config loader
    set_log_level(lvl);
    return server::run_server(*cfg);
  };
}

KVS_REGISTER_COMMAND(add_serve, 10);

}  // namespace kvserve::cli

// The `kvserve serve` configuration: one flat set of keys that can come from a YAML file,
// KVSERVE_* environment variables and command-line flags.
//
// Precedence (highest first): flags > environment > file > built-in defaults. Each source is
// applied on top of the previous one, key by key, so a flag overrides only its own key.
// Every key is validated where it is read; an unknown key or a bad value is an error that
// names the key and its source, and the server refuses to start.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "util/status.h"

namespace kvserve::server {

struct ServerConfig {
  std::string model;                  // GGUF path (required)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string kv_type = "f32";        // f32 | f16 | bf16 | q8_0 | q4_0 (K and V)
  std::string kv_type_k;              // K type, overrides kv_type; "" = kv_type
  std::string kv_type_v;              // V type, overrides kv_type; "" = kv_type
  std::string kv_memory;              // bytes ("512MiB") or a RAM fraction ("0.6"); empty: sized by ctx
  int64_t ctx = 0;                    // 0: the model's context length
  int block_size = 16;
  int max_seqs = 16;                  // sequences running at once
  int max_batched_tokens = 512;       // tokens per forward pass
  int max_queue = 64;                 // requests waiting; beyond it: 429
  double request_timeout = 600;       // seconds per request; 0: none
  uint64_t max_body_bytes = 1 << 20;  // request body limit; beyond it: 413
  int max_tokens_limit = 4096;        // largest max_tokens a request may ask for
  bool no_cache = false;
  std::string context_overflow = "error";  // prompt + max_tokens > ctx: error (400) | truncate | shift
  int n_keep = 4;                     // sink tokens a context shift keeps
  int64_t attention_window = 0;       // sliding attention window; 0: the model's own, else none
  bool prefix_cache = true;           // share KV blocks of common prompt prefixes (on | off)
  double cache_pin_fraction = 0.2;    // share of KV blocks POST /cache/pin may hold
  std::string log_format = "text";    // text | json
  std::string log_level = "info";     // debug | info | warn | error | off
  int threads = 0;                    // engine threads; 0: one per core
  std::string chat_template;          // "" (detect) or a family name, see chat_template.h
  std::string served_model_name;      // the model id clients see; "": general.name, else the file name
  int http_threads = 0;  // HTTP handler threads; 0: max(256, max_seqs + max_queue + 4), at most 1024
  double shutdown_timeout = 10;       // seconds to drain in-flight requests on SIGTERM
  std::string api_key;                // requests must send "Authorization: Bearer KEY"; "" = open
  std::string api_key_file;           // the key on the first line of this file (not with api_key)
  std::string cors_origins;           // browser origins allowed: "" none, "*", or a comma list
};

// Where the keys come from. `env` holds the environment (only KVSERVE_* entries are read);
// `flags` holds the flags that were given on the command line, by key name.
struct ConfigSources {
  std::string file_path;  // "" for none
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> flags;
};

// Every key, in the order --print-config writes them.
const std::vector<std::string>& config_keys();

// Sets one key from its text form; `source` ("flag --port", "KVSERVE_PORT", "file x.yaml")
// is named in the error.
Status set_config_key(ServerConfig* cfg, const std::string& key, const std::string& value, const std::string& source);

// Applies the YAML document `text` (a flat mapping of key: scalar).
Status apply_yaml(ServerConfig* cfg, const std::string& text, const std::string& source);

// Defaults, then file, then env, then flags; then checks the whole (model given, ...).
Expected<ServerConfig> load_server_config(const ConfigSources& sources);

// The KVSERVE_* entries of the process environment.
std::map<std::string, std::string> kvserve_environment();

// The effective configuration as YAML (what --print-config prints); apply_yaml accepts it.
std::string config_to_yaml(const ServerConfig& cfg);

// "max_seqs" -> "KVSERVE_MAX_SEQS".
std::string env_name(const std::string& key);

}  // namespace kvserve::server

#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "server/access_control.h"
#include "util/thread_pool.h"
#include "util/units.h"

extern char** environ;

namespace kvserve::server {
namespace {

Status bad(const std::string& source, const std::string& key, const std::string& why) {
  return invalid_argument(source + ": " + key + ": " + why);
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") return *out = true, true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// One setter per key: parse, range-check, store. Ranges are what the engine and the OS accept.
using Setter = std::function<Status(ServerConfig*, const std::string& v, const std::string& src, const std::string& key)>;

Setter int_key(int ServerConfig::*field, int64_t lo, int64_t hi) {
  return [=](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
    int64_t x = 0;
    if (!parse_int(v, &x) || x < lo || x > hi)
      return bad(src, key, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v + "'");
    c->*field = int(x);
    return Status::ok_status();
  };
}

// A token count in 0..2^24 where 0 means `zero_means`.
Setter tokens_key(int64_t ServerConfig::*field, const std::string& zero_means) {
  return [=](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
    int64_t x = 0;
    if (!parse_int(v, &x) || x < 0 || x > (int64_t(1) << 24))
      return bad(src, key, "expected an integer in 0..16777216 (0: " + zero_means + "), got '" + v + "'");
    c->*field = x;
    return Status::ok_status();
  };
}

Setter seconds_key(double ServerConfig::*field) {
  return [=](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
    double x = 0;
    if (!parse_double(v, &x) || x < 0 || x > 86400 * 7)
      return bad(src, key, "expected seconds in 0..604800, got '" + v + "'");
    c->*field = x;
    return Status::ok_status();
  };
}

// Any text, empty included (a path, a secret).
Setter text_key(std::string ServerConfig::*field) {
  return [=](ServerConfig* c, const std::string& v, const std::string&, const std::string&) -> Status {
    c->*field = v;
    return Status::ok_status();
  };
}

Setter choice_key(std::string ServerConfig::*field, std::vector<std::string> choices) {
  return [=](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
    std::string list;
    for (const auto& ch : choices) {
      if (v == ch) {
        c->*field = v;
        return Status::ok_status();
      }
      list += (list.empty() ? "" : ", ") + ch;
    }
    return bad(src, key, "expected one of " + list + ", got '" + v + "'");
  };
}

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> s = {
      {"model",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         if (v.empty()) return bad(src, key, "must not be empty");
         c->model = v;
         return Status::ok_status();
       }},
      {"host",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         if (v.empty()) return bad(src, key, "must not be empty");
         c->host = v;
         return Status::ok_status();
       }},
      {"port", int_key(&ServerConfig::port, 0, 65535)},
      {"kv_type", choice_key(&ServerConfig::kv_type, {"f32", "f16", "bf16", "q8_0", "q4_0"})},
      {"kv_type_k", choice_key(&ServerConfig::kv_type_k, {"", "f32", "f16", "bf16", "q8_0", "q4_0"})},
      {"kv_type_v", choice_key(&ServerConfig::kv_type_v, {"", "f32", "f16", "bf16", "q8_0", "q4_0"})},
      {"kv_memory",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         if (!v.empty()) {
           auto b = parse_memory_budget(v);
           if (!b.ok()) return bad(src, key, b.status().message());
         }
         c->kv_memory = v;
         return Status::ok_status();
       }},
      {"ctx", tokens_key(&ServerConfig::ctx, "the model's")},
      {"block_size", int_key(&ServerConfig::block_size, 1, 4096)},
      {"max_seqs", int_key(&ServerConfig::max_seqs, 1, 4096)},
      {"max_batched_tokens", int_key(&ServerConfig::max_batched_tokens, 1, 1 << 20)},
      {"max_queue", int_key(&ServerConfig::max_queue, 0, 1 << 20)},
      {"request_timeout", seconds_key(&ServerConfig::request_timeout)},
      {"max_body_bytes",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         auto b = parse_bytes(v);
         if (!b.ok()) return bad(src, key, b.status().message());
         if (*b < 64 || *b > (uint64_t(1) << 30))
           return bad(src, key, "must be in 64 bytes..1GiB, got '" + v + "'");
         c->max_body_bytes = *b;
         return Status::ok_status();
       }},
      {"max_tokens_limit", int_key(&ServerConfig::max_tokens_limit, 1, 1 << 24)},
      {"no_cache",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         if (!parse_bool(v, &c->no_cache)) return bad(src, key, "expected true or false, got '" + v + "'");
         return Status::ok_status();
       }},
      {"context_overflow", choice_key(&ServerConfig::context_overflow, {"error", "truncate", "shift"})},
      {"n_keep", int_key(&ServerConfig::n_keep, 0, 1 << 20)},
      {"attention_window", tokens_key(&ServerConfig::attention_window, "the model's own window, else none")},
      {"prefix_cache",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         if (v == "on" || v == "off") {
           c->prefix_cache = v == "on";
         } else if (!parse_bool(v, &c->prefix_cache)) {
           return bad(src, key, "expected on or off, got '" + v + "'");
         }
         return Status::ok_status();
       }},
      {"cache_pin_fraction",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         char* end = nullptr;
         const double x = std::strtod(v.c_str(), &end);
         if (v.empty() || end != v.c_str() + v.size() || !(x >= 0 && x <= 1))
           return bad(src, key, "expected a fraction in 0..1, got '" + v + "'");
         c->cache_pin_fraction = x;
         return Status::ok_status();
       }},
      {"log_format", choice_key(&ServerConfig::log_format, {"text", "json"})},
      {"log_level", choice_key(&ServerConfig::log_level, {"debug", "info", "warn", "error", "off"})},
      {"threads", int_key(&ServerConfig::threads, 0, kMaxThreads)},
      {"chat_template", choice_key(&ServerConfig::chat_template, {"", "auto", "chatml", "llama2", "llama3",
                                                                  "mistral", "zephyr", "phi3", "plain"})},
      {"served_model_name", text_key(&ServerConfig::served_model_name)},
      {"http_threads", int_key(&ServerConfig::http_threads, 0, 4096)},
      {"shutdown_timeout", seconds_key(&ServerConfig::shutdown_timeout)},
      {"api_key", text_key(&ServerConfig::api_key)},
      {"api_key_file", text_key(&ServerConfig::api_key_file)},
      {"cors_origins",
       [](ServerConfig* c, const std::string& v, const std::string& src, const std::string& key) -> Status {
         Status st = validate_cors_origins(v);
         if (!st.ok()) return bad(src, key, st.message());
         c->cors_origins = v;
         return Status::ok_status();
       }},
  };
  return s;
}

std::string yaml_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string format_seconds(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> k = {"model",
                                             "host",
                                             "port",
                                             "kv_type",
                                             "kv_type_k",
                                             "kv_type_v",
                                             "kv_memory",
                                             "ctx",
                                             "block_size",
                                             "max_seqs",
                                             "max_batched_tokens",
                                             "max_queue",
                                             "request_timeout",
                                             "max_body_bytes",
                                             "max_tokens_limit",
                                             "no_cache",
                                             "context_overflow",
                                             "n_keep",
                                             "attention_window",
                                             "prefix_cache",
                                             "cache_pin_fraction",
                                             "log_format",
                                             "log_level",
                                             "threads",
                                             "chat_template",
                                             "served_model_name",
                                             "http_threads",
                                             "shutdown_timeout",
                                             "api_key",
                                             "api_key_file",
                                             "cors_origins"};
  return k;
}

std::string env_name(const std::string& key) {
  std::string out = "KVSERVE_";
  for (char c : key) out += char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

Status set_config_key(ServerConfig* cfg, const std::string& key, const std::string& value, const std::string& source) {
  auto it = setters().find(key);
  if (it == setters().end()) return invalid_argument(source + ": unknown key '" + key + "'");
  return it->second(cfg, value, source, key);
}

Status apply_yaml(ServerConfig* cfg, const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return invalid_argument(source + ": not valid YAML: " + e.what());
  }
  if (root.IsNull()) return Status::ok_status();  // an empty file sets nothing
  if (!root.IsMap()) return invalid_argument(source + ": expected a mapping of key: value");
  std::set<std::string> seen;  // YAML forbids a key twice; yaml-cpp keeps both
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception&) {
      return invalid_argument(source + ": a key is not a string");
    }
    if (!seen.insert(key).second)
      return invalid_argument(source + ": " + key + ": given twice (which one was meant?)");
    if (!kv.second.IsScalar() && !kv.second.IsNull())
      return invalid_argument(source + ": " + key + ": expected a single value");
    std::string value = kv.second.IsNull() ? "" : kv.second.Scalar();
    KVS_RETURN_IF_ERROR(set_config_key(cfg, key, value, source));
  }
  return Status::ok_status();
}

Expected<ServerConfig> load_server_config(const ConfigSources& sources) {
  ServerConfig cfg;
  if (!sources.file_path.empty()) {
    std::ifstream in(sources.file_path);
    if (!in) return not_found("--config: cannot read '" + sources.file_path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    KVS_RETURN_IF_ERROR(apply_yaml(&cfg, ss.str(), "config file " + sources.file_path));
  }
  // Unknown KVSERVE_* variables are errors too: a typo must not silently leave a default. The
  // process-wide kernel knobs (read by the kernels and the model loader, not configuration) pass.
  std::map<std::string, std::string> by_env;
  for (const auto& key : config_keys()) by_env[env_name(key)] = key;
  for (const auto& [name, value] : sources.env) {
    if (name.rfind("KVSERVE_", 0) != 0 || name == "KVSERVE_KERNELS" || name == "KVSERVE_REPACK" ||
        name == "KVSERVE_BF16_DOT")
      continue;
    auto it = by_env.find(name);
    if (it == by_env.end()) return invalid_argument("environment: unknown variable " + name);
    KVS_RETURN_IF_ERROR(set_config_key(&cfg, it->second, value, "environment " + name));
  }
  for (const auto& [key, value] : sources.flags) {
    std::string flag = key;
    for (char& c : flag)
      if (c == '_') c = '-';
    KVS_RETURN_IF_ERROR(set_config_key(&cfg, key, value, "flag --" + flag));
  }
  if (cfg.model.empty()) return invalid_argument("model: required (-m PATH, KVSERVE_MODEL or model: in the config file)");
  return cfg;
}

std::map<std::string, std::string> kvserve_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("KVSERVE_", 0) != 0) continue;
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

std::string config_to_yaml(const ServerConfig& c) {
  std::ostringstream os;
  os << "model: " << yaml_quote(c.model) << "\n"
     << "host: " << yaml_quote(c.host) << "\n"
     << "port: " << c.port << "\n"
     << "kv_type: " << c.kv_type << "\n"
     << "kv_type_k: " << yaml_quote(c.kv_type_k) << "\n"
     << "kv_type_v: " << yaml_quote(c.kv_type_v) << "\n"
     << "kv_memory: " << yaml_quote(c.kv_memory) << "\n"
     << "ctx: " << c.ctx << "\n"
     << "block_size: " << c.block_size << "\n"
     << "max_seqs: " << c.max_seqs << "\n"
     << "max_batched_tokens: " << c.max_batched_tokens << "\n"
     << "max_queue: " << c.max_queue << "\n"
     << "request_timeout: " << format_seconds(c.request_timeout) << "\n"
     << "max_body_bytes: " << c.max_body_bytes << "\n"
     << "max_tokens_limit: " << c.max_tokens_limit << "\n"
     << "no_cache: " << (c.no_cache ? "true" : "false") << "\n"
     << "context_overflow: " << c.context_overflow << "\n"
     << "n_keep: " << c.n_keep << "\n"
     << "attention_window: " << c.attention_window << "\n"
     << "prefix_cache: " << (c.prefix_cache ? "on" : "off") << "\n"
     << "cache_pin_fraction: " << c.cache_pin_fraction << "\n"
     << "log_format: " << c.log_format << "\n"
     << "log_level: " << c.log_level << "\n"
     << "threads: " << c.threads << "\n"
     << "chat_template: " << yaml_quote(c.chat_template) << "\n"
     << "served_model_name: " << yaml_quote(c.served_model_name) << "\n"
     << "http_threads: " << c.http_threads << "\n"
     << "shutdown_timeout: " << format_seconds(c.shutdown_timeout) << "\n";
  // The key itself is never printed: the output goes to terminals, logs and tickets.
  if (c.api_key.empty()) os << "api_key: \"\"\n";
  else os << "# api_key: set (not shown)\n";
  os << "api_key_file: " << yaml_quote(c.api_key_file) << "\n"
     << "cors_origins: " << yaml_quote(c.cors_origins) << "\n";
  return os.str();
}

}  // namespace kvserve::server

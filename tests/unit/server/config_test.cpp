#include "server/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvserve::server {
namespace {

ConfigSources with_model() {
  ConfigSources s;
  s.flags["model"] = "m.gguf";
  return s;
}

TEST(ServerConfig, DefaultsWhenOnlyTheModelIsGiven) {
  auto c = load_server_config(with_model());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->port, 8080);
  EXPECT_EQ(c->max_queue, 64);
  EXPECT_EQ(c->log_format, "text");
  EXPECT_EQ(c->max_body_bytes, 1u << 20);
}

TEST(ServerConfig, ModelIsRequired) {
  auto c = load_server_config(ConfigSources{});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model"), std::string::npos);
}

TEST(ServerConfig, PrecedenceFlagsOverEnvOverFile) {
  std::string path = ::testing::TempDir() + "/kvs_cfg_test.yaml";
  {
    std::ofstream f(path);
    f << "model: file.gguf\nport: 1000\nmax_queue: 5\nlog_format: json\n";
  }
  ConfigSources s;
  s.file_path = path;
  s.env["KVSERVE_PORT"] = "2000";
  s.env["KVSERVE_MAX_QUEUE"] = "6";
  s.env["PATH"] = "/bin";  // not ours: ignored
  s.flags["port"] = "3000";
  auto c = load_server_config(s);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model, "file.gguf");  // file only
  EXPECT_EQ(c->port, 3000);          // flag beats env and file
  EXPECT_EQ(c->max_queue, 6);        // env beats file
  EXPECT_EQ(c->log_format, "json");  // file beats default
  std::remove(path.c_str());
}

TEST(ServerConfig, UnknownFileKeyIsAnErrorNamingIt) {
  ServerConfig c;
  Status s = apply_yaml(&c, "model: x\nmax_sequences: 4\n", "config file a.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("max_sequences"), std::string::npos);
  EXPECT_NE(s.message().find("a.yaml"), std::string::npos);
}

TEST(ServerConfig, UnknownEnvVariableIsAnError) {
  auto s = with_model();
  s.env.emplace("KVSERVE_PROT", "1");  // emplace: operator= trips a GCC 12 -Wrestrict false positive
  auto c = load_server_config(s);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("KVSERVE_PROT"), std::string::npos);
}

// The kernel knobs are read by the kernels and the model loader, not the configuration: they
// must not stop a server from starting.
TEST(ServerConfig, KernelKnobsAreNotConfigKeys) {
  auto s = with_model();
  s.env.emplace("KVSERVE_KERNELS", "avx2");
  s.env.emplace("KVSERVE_REPACK", "0");
  s.env.emplace("KVSERVE_BF16_DOT", "0");
  EXPECT_TRUE(load_server_config(s).ok());
}

TEST(ServerConfig, BadValuesNameKeyAndSource) {
  struct Case {
    const char* key;
    const char* value;
  } cases[] = {{"port", "70000"},       {"port", "abc"},          {"max_seqs", "0"},      {"kv_type", "q4"},
               {"log_format", "xml"},   {"no_cache", "maybe"},    {"max_body_bytes", "1"}, {"kv_memory", "lots"},
               {"request_timeout", "-1"}, {"chat_template", "jinja"}, {"ctx", "-5"},        {"log_level", "loud"}};
  for (const auto& cs : cases) {
    auto s = with_model();
    s.flags[cs.key] = cs.value;
    auto c = load_server_config(s);
    ASSERT_FALSE(c.ok()) << cs.key << "=" << cs.value;
    EXPECT_NE(c.status().message().find(cs.key), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("flag --"), std::string::npos) << c.status().message();
  }
}

TEST(ServerConfig, MalformedYamlIsAnError) {
  ServerConfig c;
  EXPECT_FALSE(apply_yaml(&c, "model: [unclosed\n", "f").ok());
  EXPECT_FALSE(apply_yaml(&c, "- a\n- b\n", "f").ok());
  EXPECT_FALSE(apply_yaml(&c, "port: [1, 2]\n", "f").ok());
  EXPECT_TRUE(apply_yaml(&c, "", "f").ok());
  // A key given twice is a mistake either way: refused, naming it (yaml-cpp kept the last).
  const Status twice = apply_yaml(&c, "port: 8080\nmax_seqs: 4\nport: 8081\n", "f");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("port: given twice"), std::string::npos) << twice.message();
}

TEST(ServerConfig, PrintedYamlReadsBackToTheSameValues) {
  auto s = with_model();
  s.flags["max_body_bytes"] = "2MiB";
  s.flags["kv_memory"] = "64MiB";
  s.flags["request_timeout"] = "2.5";
  s.flags["no_cache"] = "true";
  s.flags["served_model_name"] = "org/model \"7b\"";
  auto c = load_server_config(s);
  ASSERT_TRUE(c.ok());
  std::string yaml = config_to_yaml(*c);
  for (const auto& key : config_keys()) EXPECT_NE(yaml.find(key + ":"), std::string::npos) << key;
  ServerConfig back;
  ASSERT_TRUE(apply_yaml(&back, yaml, "printed").ok());
  EXPECT_EQ(config_to_yaml(back), yaml);
  EXPECT_EQ(back.max_body_bytes, 2u << 20);
  EXPECT_TRUE(back.no_cache);
  EXPECT_EQ(back.served_model_name, "org/model \"7b\"");
}

// The key is configuration like any other (KVSERVE_API_KEY is the usual way in), but the printed
// configuration never shows it: it goes to terminals and tickets. Read back, it sets no key.
TEST(ServerConfig, ApiKeyIsAcceptedButNeverPrinted) {
  auto s = with_model();
  s.env["KVSERVE_API_KEY"] = "sk-very-secret";
  s.flags["cors_origins"] = "https://ui.example.com,http://localhost:3000";
  auto c = load_server_config(s);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->api_key, "sk-very-secret");
  const std::string yaml = config_to_yaml(*c);
  EXPECT_EQ(yaml.find("sk-very-secret"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# api_key: set (not shown)"), std::string::npos) << yaml;
  ServerConfig back;
  ASSERT_TRUE(apply_yaml(&back, yaml, "printed").ok());
  EXPECT_TRUE(back.api_key.empty());
  EXPECT_EQ(back.cors_origins, "https://ui.example.com,http://localhost:3000");
}

TEST(ServerConfig, BadCorsOriginsAreRefused) {
  for (const char* bad : {"ui.example.com", "https://ui.example.com/", "https://a.com/path", "*,https://a.com", "https://"}) {
    auto s = with_model();
    s.flags["cors_origins"] = bad;
    auto c = load_server_config(s);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("--cors-origins"), std::string::npos) << c.status().message();
  }
}

TEST(ServerConfig, EnvName) { EXPECT_EQ(env_name("max_batched_tokens"), "KVSERVE_MAX_BATCHED_TOKENS"); }

}  // namespace
}  // namespace kvserve::server

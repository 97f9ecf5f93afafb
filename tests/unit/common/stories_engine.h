// An Engine on stories260K for the engine tests: the model path, a light configuration, creation
// that reports failure, the Generator to compare with, and the wait for every KV block to come back after the
// requests end.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "engine/generator.h"
#include "kvserve/engine.h"

namespace kvserve::test {

inline std::string stories_path() { return std::string(KVS_SHARED_DIR) + "/models/stories260K.gguf"; }

inline EngineConfig stories_config() {
  EngineConfig c;
  c.model_path = stories_path();
  c.threads = 1;  // the tiny model gains nothing from workers; keeps the test light on shared CPUs
  return c;
}

inline std::unique_ptr<Engine> make_engine(const EngineConfig& c) {
  auto e = Engine::create(c);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The single-sequence reference the engine's outputs are compared with (nullptr on failure).
inline std::unique_ptr<Generator> stories_generator() {
  GeneratorOptions o;
  o.model_path = stories_path();
  o.threads = 1;
  auto gen = Generator::create(o);
  EXPECT_TRUE(gen.ok()) << gen.status().to_string();
  return gen.ok() ? std::move(gen).value() : nullptr;
}

// Blocks are given back by the loop thread a step after a request ends: wait (at most 1 s).
inline void wait_for_blocks_released(Engine& e) {
  for (int i = 0; i < 200 && e.stats().kv_blocks_used != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
}

}  // namespace kvserve::test

// ForwardPass::set_phase_timing: off by default, counts only successful runs, never changes the
// logits, and its phases account for (nearly) all of a run's wall time. No timing thresholds
// beyond that accounting: test machines are noisy.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "model/model_test_util.h"

namespace kvserve {
namespace {

using testing::shared_path;

// stories260K over a 4-block (64-position) f32 cache, and a pass on two pool threads.
class ForwardPhasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(shared_path("models/stories260K.gguf"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    auto kv = KvStorage::create(testing::model_kv_layout(*model_, 16), 4);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    kv_ = std::make_unique<KvStorage>(std::move(kv).value());
    pass_ = std::make_unique<ForwardPass>(*model_, *kv_, pool_);
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvStorage> kv_;
  ThreadPool pool_{2};
  std::unique_ptr<ForwardPass> pass_;
  std::vector<int32_t> table_{0, 1, 2, 3};
};

ForwardBatch tokens_at(const std::vector<int32_t>& table, int64_t start, std::vector<int32_t> tokens) {
  ForwardBatch b;
  b.chunks.push_back({start, int32_t(tokens.size()), table, false});
  b.tokens = std::move(tokens);
  return b;
}

TEST(ForwardPhases, NamesEveryPhaseOnce) {
  std::vector<std::string> names;
  for (int p = 0; p < ForwardPhases::kCount; ++p) names.push_back(ForwardPhases::name(p));
  EXPECT_EQ(names, (std::vector<std::string>{"qkv", "attention", "wo", "ffn_gate_up", "ffn_down", "output",
                                             "other"}));
  EXPECT_STREQ(ForwardPhases::name(ForwardPhases::kCount), "?");
  ForwardPhases p;
  p.ms[ForwardPhases::kQkv] = 1.5;
  p.ms[ForwardPhases::kOther] = 0.25;
  EXPECT_DOUBLE_EQ(p.total_ms(), 1.75);
}

TEST_F(ForwardPhasesTest, TimedRunsAccountForTheirWallTimeAndKeepTheLogits) {
  ForwardPass& pass = *pass_;
  std::vector<float> plain, timed;
  const ForwardBatch prompt = tokens_at(table_, 0, {1, 42, 7, 300, 9, 11, 12, 13});
  ASSERT_TRUE(pass.run(prompt, &plain).ok());

  ForwardPhases phases;
  pass.set_phase_timing(&phases);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ASSERT_TRUE(pass.run(prompt, &timed).ok());  // the same prefill again: the same slots, the same logits
  for (int64_t pos = 8; pos < 24; ++pos) {
    std::vector<float> logits;
    ASSERT_TRUE(pass.run(tokens_at(table_, pos, {int32_t(pos * 3)}), &logits).ok());
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  pass.set_phase_timing(nullptr);

  ASSERT_EQ(plain.size(), timed.size());
  EXPECT_EQ(0, std::memcmp(plain.data(), timed.data(), plain.size() * sizeof(float)));
  EXPECT_EQ(phases.runs, 17);
  for (int p = 0; p < ForwardPhases::kCount; ++p) {
    SCOPED_TRACE(ForwardPhases::name(p));
    EXPECT_GT(phases.ms[p], 0.0);  // every phase runs in every pass
  }
  // The laps cover run() from its start to its return: their sum is the runs' wall time less
  // what the loop does between runs (building a batch), never more.
  EXPECT_LE(phases.total_ms(), wall_ms);
  EXPECT_GE(phases.total_ms(), 0.5 * wall_ms);

  // Off again: further runs add nothing.
  const ForwardPhases before = phases;
  std::vector<float> logits;
  ASSERT_TRUE(pass.run(tokens_at(table_, 24, {5}), &logits).ok());
  EXPECT_EQ(phases.runs, before.runs);
  EXPECT_EQ(phases.total_ms(), before.total_ms());
}

TEST_F(ForwardPhasesTest, AFailedRunCountsNothing) {
  ForwardPass& pass = *pass_;
  ForwardPhases phases;
  pass.set_phase_timing(&phases);
  std::vector<float> logits;
  // A token id past the vocabulary: refused before any work.
  EXPECT_FALSE(pass.run(tokens_at(table_, 0, {model_->hparams().n_vocab}), &logits).ok());
  EXPECT_EQ(phases.runs, 0);
  EXPECT_EQ(phases.total_ms(), 0.0);
  ASSERT_TRUE(pass.run(tokens_at(table_, 0, {1}), &logits).ok());
  EXPECT_EQ(phases.runs, 1);
}

}  // namespace
}  // namespace kvserve

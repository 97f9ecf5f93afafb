#include "metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "metrics/process.h"

namespace kvserve::metrics {
namespace {

TEST(MetricsRegistry, CounterAndGaugeExposition) {
  Registry r;
  r.counter("kvserve:requests_total", "Requests by status.", {{"status", "200"}}).inc();
  r.counter("kvserve:requests_total", "Requests by status.", {{"status", "200"}}).inc(2);
  r.counter("kvserve:requests_total", "Requests by status.", {{"status", "429"}}).inc();
  r.gauge("kvserve:num_requests_running", "Running.").set(3);
  std::string text = r.expose();
  EXPECT_EQ(text,
            "# HELP kvserve:requests_total Requests by status.\n"
            "# TYPE kvserve:requests_total counter\n"
            "kvserve:requests_total{status=\"200\"} 3\n"
            "kvserve:requests_total{status=\"429\"} 1\n"
            "# HELP kvserve:num_requests_running Running.\n"
            "# TYPE kvserve:num_requests_running gauge\n"
            "kvserve:num_requests_running 3\n");
}

TEST(MetricsRegistry, CounterIgnoresNegativeAndNaN) {
  Counter c;
  c.inc(-5);
  c.inc(std::nan(""));
  c.inc(0.5);
  EXPECT_DOUBLE_EQ(c.value(), 0.5);
}

TEST(MetricsRegistry, HistogramBucketsAreCumulativeWithInf) {
  Registry r;
  auto& h = r.histogram("lat_seconds", "Latency.", {0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le is inclusive
  h.observe(0.5);
  h.observe(7);
  std::string text = r.expose();
  EXPECT_NE(text.find("# TYPE lat_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_sum 7.65\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_count 4\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, HistogramLabelsComeBeforeLe) {
  Registry r;
  r.histogram("h", "H.", {1}, {{"route", "/x"}}).observe(2);
  std::string text = r.expose();
  EXPECT_NE(text.find("h_bucket{route=\"/x\",le=\"1\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("h_count{route=\"/x\"} 1\n"), std::string::npos) << text;
}

TEST(MetricsRegistry, Escaping) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("x\\y\nz\""), "x\\\\y\\nz\"");
  Registry r;
  r.gauge("g", "line1\nline2", {{"k", "v\"q"}}).set(1);
  EXPECT_NE(r.expose().find("# HELP g line1\\nline2\n"), std::string::npos);
  EXPECT_NE(r.expose().find("g{k=\"v\\\"q\"} 1\n"), std::string::npos);
}

TEST(MetricsRegistry, FormatValue) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(12345678), "12345678");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(MetricsRegistry, ConcurrentIncrementsAreNotLost) {
  Registry r;
  Counter& c = r.counter("c_total", "C.");
  Histogram& h = r.histogram("h", "H.", exponential_buckets(0.001, 2, 10));
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.inc();
        h.observe(0.01);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_DOUBLE_EQ(c.value(), 40000);
  EXPECT_EQ(h.snapshot().count, 40000u);
}

TEST(MetricsRegistry, ExponentialBuckets) {
  auto b = exponential_buckets(0.001, 2, 4);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_DOUBLE_EQ(b[3], 0.008);
}

TEST(MetricsProcess, ResidentMemoryIsPositive) { EXPECT_GT(process_resident_memory_bytes(), 0u); }

}  // namespace
}  // namespace kvserve::metrics

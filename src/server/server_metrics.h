// The server's metric families (names fixed by the operations docs and dashboards) and the
// glue that fills them from per-request results and from Engine::stats() at scrape time.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvserve/engine.h"
#include "metrics/registry.h"

namespace kvserve::server {

class ServerMetrics {
 public:
  ServerMetrics();

  // A request that reached the engine finished (any way).
  void observe_result(const RequestResult& r);
  // An HTTP response went out with `status`.
  void count_response(int status);
  // A request was turned away before running: queue_full, invalid, too_large, loading,
  // shutting_down.
  void count_rejected(const std::string& reason);

  // Copies the engine's gauges and the growth of its totals since the last scrape, observes
  // the lifetimes of KV blocks evicted since then (Engine::take_evicted_block_lifetimes), then
  // renders the registry. `stats` is null while the model loads.
  std::string scrape(const EngineStats* stats, const std::vector<double>& evicted_block_lifetimes = {});

 private:
  metrics::Registry reg_;
  metrics::Gauge& running_;
  metrics::Gauge& waiting_;
  metrics::Gauge& kv_usage_;
  metrics::Gauge& kv_used_;
  metrics::Gauge& kv_total_;
  metrics::Histogram& ttft_;
  metrics::Histogram& itl_;
  metrics::Histogram& e2e_;
  metrics::Histogram& queue_;
  metrics::Counter& prompt_tokens_;
  metrics::Counter& generation_tokens_;
  metrics::Counter& preemptions_;
  metrics::Counter& context_shifts_;
  metrics::Gauge& rss_;
  // Prefix cache (issue 5): lookups and hits in prompt tokens, blocks by state, evictions.
  metrics::Counter& prefix_queries_;
  metrics::Counter& prefix_hits_;
  metrics::Counter& evictions_;
  metrics::Gauge& blocks_used_;
  metrics::Gauge& blocks_cached_;
  metrics::Gauge& blocks_free_;
  metrics::Gauge& blocks_pinned_;
  metrics::Histogram& block_lifetime_;

  std::mutex mu_;  // guards the last-seen engine totals
  int64_t last_prompt_ = 0, last_generation_ = 0, last_preemptions_ = 0, last_context_shifts_ = 0;
  int64_t last_queries_ = 0, last_hits_ = 0, last_evictions_ = 0;
};

}  // namespace kvserve::server

#include "server/server_metrics.h"

#include <algorithm>

#include "metrics/process.h"

namespace kvserve::server {
namespace {
// Latencies from 1 ms to ~65 s; inter-token gaps from 0.5 ms to ~16 s.
const std::vector<double> kLatencyBuckets = metrics::exponential_buckets(0.001, 2, 17);
const std::vector<double> kTokenGapBuckets = metrics::exponential_buckets(0.0005, 2, 16);
// How long a cached block lived before it was evicted: 10 ms to ~3 days.
const std::vector<double> kBlockLifetimeBuckets = metrics::exponential_buckets(0.01, 4, 14);
constexpr const char* kBlocksHelp = "KV cache blocks by state (used: held by sequences or pins; cached: kept for reuse).";

// Grows `c` by what the engine's running total gained since `last`, then remembers it.
void add_growth(metrics::Counter& c, int64_t total, int64_t& last) {
  if (total > last) c.inc(double(total - last));
  last = std::max(last, total);
}
}  // namespace

ServerMetrics::ServerMetrics()
    : running_(reg_.gauge("kvserve:num_requests_running", "Requests running in the engine (holding KV blocks).")),
      waiting_(reg_.gauge("kvserve:num_requests_waiting", "Requests queued or preempted, waiting to run.")),
      kv_usage_(reg_.gauge("kvserve:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0..1).")),
      kv_used_(reg_.gauge("kvserve:kv_cache_bytes", "KV cache bytes by state.", {{"state", "used"}})),
      kv_total_(reg_.gauge("kvserve:kv_cache_bytes", "KV cache bytes by state.", {{"state", "total"}})),
      ttft_(reg_.histogram("kvserve:time_to_first_token_seconds", "Time from submission to the first generated token.",
                           kLatencyBuckets)),
      itl_(reg_.histogram("kvserve:inter_token_latency_seconds", "Time between consecutive generated tokens.",
                          kTokenGapBuckets)),
      e2e_(reg_.histogram("kvserve:e2e_request_latency_seconds", "Time from submission to the end of a request.",
                          kLatencyBuckets)),
      queue_(reg_.histogram("kvserve:request_queue_time_seconds", "Time from submission until first scheduled.",
                            kLatencyBuckets)),
      prompt_tokens_(reg_.counter("kvserve:prompt_tokens_total", "Prompt tokens of finished requests.")),
      generation_tokens_(reg_.counter("kvserve:generation_tokens_total", "Generated tokens.")),
      preemptions_(reg_.counter("kvserve:num_preemptions_total", "Sequences preempted (recomputed later).")),
      context_shifts_(reg_.counter("kvserve:context_shifts_total",
                                   "Context shifts (context_overflow shift): sink tokens kept, oldest dropped.")),
      rss_(reg_.gauge("process_resident_memory_bytes", "Resident memory size in bytes.")),
      prefix_queries_(reg_.counter("kvserve:prefix_cache_queries_total",
                                   "Prompt tokens looked up in the prefix cache at admission.")),
      prefix_hits_(reg_.counter("kvserve:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.")),
      evictions_(reg_.counter("kvserve:kv_cache_evictions_total", "Cached KV blocks evicted for reuse.")),
      blocks_used_(reg_.gauge("kvserve:kv_blocks", kBlocksHelp, {{"state", "used"}})),
      blocks_cached_(reg_.gauge("kvserve:kv_blocks", kBlocksHelp, {{"state", "cached"}})),
      blocks_free_(reg_.gauge("kvserve:kv_blocks", kBlocksHelp, {{"state", "free"}})),
      blocks_pinned_(reg_.gauge("kvserve:kv_blocks", kBlocksHelp, {{"state", "pinned"}})),
      block_lifetime_(reg_.histogram("kvserve:kv_block_lifetime_seconds",
                                     "Time a cached KV block lived, from commit to eviction.", kBlockLifetimeBuckets)) {
  // Pre-create the common label values so dashboards see zeros instead of missing series.
  for (const char* s : {"200", "400", "413", "429", "500", "503"})
    reg_.counter("kvserve:requests_total", "HTTP responses by status code.", {{"status", s}});
  for (const char* r : {"queue_full", "invalid", "too_large", "loading", "shutting_down", "unauthorized"})
    reg_.counter("kvserve:requests_rejected_total", "Requests turned away before running, by reason.", {{"reason", r}});
}

void ServerMetrics::observe_result(const RequestResult& r) {
  if (r.generated_tokens > 0) ttft_.observe(r.ttft_seconds);
  for (double gap : r.inter_token_seconds) itl_.observe(gap);
  e2e_.observe(r.total_seconds);
  queue_.observe(r.queue_seconds);
}

void ServerMetrics::count_response(int status) {
  reg_.counter("kvserve:requests_total", "HTTP responses by status code.", {{"status", std::to_string(status)}}).inc();
}

void ServerMetrics::count_rejected(const std::string& reason) {
  reg_.counter("kvserve:requests_rejected_total", "Requests turned away before running, by reason.",
               {{"reason", reason}})
      .inc();
}

std::string ServerMetrics::scrape(const EngineStats* s, const std::vector<double>& evicted_block_lifetimes) {
  for (double life : evicted_block_lifetimes) block_lifetime_.observe(life);
  if (s) {
    blocks_used_.set(double(s->kv_blocks_used));
    blocks_cached_.set(double(s->prefix.blocks_cached));
    blocks_free_.set(double(s->prefix.blocks_free));
    blocks_pinned_.set(double(s->prefix.blocks_pinned));
    running_.set(s->num_running);
    waiting_.set(s->num_waiting);
    kv_usage_.set(s->kv_blocks_total > 0 ? double(s->kv_blocks_used) / double(s->kv_blocks_total) : 0.0);
    kv_used_.set(double(s->kv_bytes_used));
    kv_total_.set(double(s->kv_bytes_total));
    std::lock_guard<std::mutex> lk(mu_);
    // The engine keeps running totals; counters grow by the difference since the last scrape.
    add_growth(prompt_tokens_, s->prompt_tokens_total, last_prompt_);
    add_growth(generation_tokens_, s->generation_tokens_total, last_generation_);
    add_growth(preemptions_, s->preemptions_total, last_preemptions_);
    add_growth(context_shifts_, s->context_shifts_total, last_context_shifts_);
    add_growth(prefix_queries_, s->prefix.query_tokens_total, last_queries_);
    add_growth(prefix_hits_, s->prefix.hit_tokens_total, last_hits_);
    add_growth(evictions_, s->prefix.evictions_total, last_evictions_);
  }
  rss_.set(double(metrics::process_resident_memory_bytes()));
  return reg_.expose();
}

}  // namespace kvserve::server

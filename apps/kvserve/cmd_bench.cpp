// kvserve bench: prefill and batched decode throughput, the machine's read bandwidth and the
// decode roofline fraction, and (--cache-compare) the KV cache's latency benefit. A table by
// default, one JSON object with --json.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "bench_server.h"
#include "commands.h"
#include "engine/benchmark.h"
#include "util/units.h"

namespace kvserve::cli {
namespace {

nlohmann::json rate_json(const Rate& r) { return {{"best", r.best}, {"median", r.median}}; }

// Mean milliseconds per forward pass of each phase ({} when none was timed).
nlohmann::json phases_json(const ForwardPhases& p) {
  nlohmann::json j = nlohmann::json::object();
  if (p.runs == 0) return j;
  for (int i = 0; i < ForwardPhases::kCount; ++i) j[ForwardPhases::name(i)] = p.ms[i] / double(p.runs);
  return j;
}

// "qkv 0.39 | attention 0.14 | ..." in mean ms per forward pass.
std::string phases_text(const ForwardPhases& p) {
  std::string out;
  for (int i = 0; i < ForwardPhases::kCount; ++i) {
    char cell[64];
    std::snprintf(cell, sizeof cell, "%s%s %.3f", i > 0 ? " | " : "", ForwardPhases::name(i),
                  p.ms[i] / double(p.runs));
    out += cell;
  }
  return out;
}

nlohmann::json to_json(const BenchReport& r) {
  nlohmann::json j;
  j["machine"] = {{"cpu_model", r.machine.cpu_model},
                  {"logical_cpus", r.machine.logical_cpus},
                  {"threads", r.machine.threads},
                  {"isa", r.machine.isa},
                  {"cpu_flags", r.machine.cpu_flags}};
  j["model"] = {{"path", r.model_path}, {"arch", r.arch}, {"context_length", r.model_ctx}};
  j["kv_type"] = r.kv_type;
  j["weight_bytes_per_token"] = r.weight_bytes;
  j["prefill"] = {{"tokens", r.prefill.tokens}, {"tok_per_s", rate_json(r.prefill.tok_per_s)}};
  j["decode"] = nlohmann::json::array();
  for (const DecodeResult& d : r.decode) {
    j["decode"].push_back({{"batch", d.batch},
                           {"context", d.context},
                           {"steps", d.steps},
                           {"tok_per_s", rate_json(d.tok_per_s)},
                           {"per_seq_tok_per_s", d.per_seq_tok_per_s},
                           {"ms_per_step", d.ms_per_step},
                           {"kv_bytes_per_step", d.kv_bytes_per_step},
                           {"gb_per_s", d.gb_per_s},
                           {"vs_batch1", d.vs_batch1}});
    if (d.phases.runs > 0) j["decode"].back()["phases_ms_per_step"] = phases_json(d.phases);
  }
  if (r.has_bandwidth) {
    j["bandwidth"] = {{"gb_per_s", r.bandwidth.gb_per_s},
                      {"median_gb_per_s", r.bandwidth.median_gb_per_s},
                      {"buffer_bytes", r.bandwidth.buffer_bytes},
                      {"threads", r.bandwidth.threads},
                      {"passes", r.bandwidth.passes},
                      {"around_decode_batch1", r.bandwidth_around_batch1}};
    j["bandwidth"]["pass_gb_per_s"] = r.bandwidth.pass_gb_per_s;
    j["roofline"] = {{"tok_per_s", r.roofline_tok_per_s},
                     {"decode_batch1_fraction", r.roofline_fraction},
                     {"decode_batch1_bandwidth_fraction", r.bandwidth_fraction}};
  }
  if (!r.cache_compare.empty()) {
    j["cache_compare"] = nlohmann::json::array();
    for (const CacheCompareRow& c : r.cache_compare) {
      j["cache_compare"].push_back({{"context", c.context},
                                    {"cached_ms", c.cached_ms},
                                    {"uncached_ms", c.uncached_ms},
                                    {"reduction_pct", c.reduction_pct},
                                    {"cached_tokens", c.cached_tokens},
                                    {"uncached_tokens", c.uncached_tokens}});
      if (c.cached_phases.runs > 0)
        j["cache_compare"].back()["cached_phases_ms"] = phases_json(c.cached_phases);
    }
  }
  j["notes"] = r.notes;
  return j;
}

void print_table(const BenchReport& r, int repeat) {
  const MachineInfo& m = r.machine;
  std::printf("machine: %s | %d logical CPUs | %d threads | kernels: %s | cpu: %s\n", m.cpu_model.c_str(),
              m.logical_cpus, m.threads, m.isa.c_str(), m.cpu_flags.c_str());
  std::printf("model:   %s (%s, context %lld) | weights read per token: %s (%zu bytes) | KV %s\n",
              r.model_path.c_str(), r.arch.c_str(), (long long)r.model_ctx,
              format_bytes(r.weight_bytes).c_str(), r.weight_bytes, r.kv_type.c_str());
  for (const std::string& n : r.notes) std::printf("note:    %s\n", n.c_str());
  std::printf("\n%-22s %12s %12s\n", "", "best", "median");
  std::printf("%-22s %12.1f %12.1f  tok/s (%d runs)\n",
              ("prefill " + std::to_string(r.prefill.tokens)).c_str(), r.prefill.tok_per_s.best,
              r.prefill.tok_per_s.median, repeat);
  for (const DecodeResult& d : r.decode) {
    char label[64];
    std::snprintf(label, sizeof label, "decode batch %d", d.batch);
    std::printf(
        "%-22s %12.1f %12.1f  tok/s aggregate | %.1f tok/s per seq | %.2f ms/step | ctx %lld, %lld steps | "
        "%.1f GB/s with %s K/V per step",
        label, d.tok_per_s.best, d.tok_per_s.median, d.per_seq_tok_per_s, d.ms_per_step, (long long)d.context,
        (long long)d.steps, d.gb_per_s, format_bytes(size_t(d.kv_bytes_per_step)).c_str());
    if (d.batch > 1 && d.vs_batch1 > 0) std::printf(" | %.2fx batch 1 (median of paired runs)", d.vs_batch1);
    std::printf("\n");
    if (d.phases.runs > 0)
      std::printf("%-22s ms/step (mean): %s\n", "  phases", phases_text(d.phases).c_str());
  }
  if (r.has_bandwidth) {
    std::printf("\nread bandwidth: %.1f GB/s best, %.1f median (%s buffer, %d threads, %d passes%s)\n",
                r.bandwidth.gb_per_s, r.bandwidth.median_gb_per_s,
                format_bytes(r.bandwidth.buffer_bytes).c_str(), r.bandwidth.threads, r.bandwidth.passes,
                r.bandwidth_around_batch1 ? ", around decode batch 1" : "");
    std::printf(
        "roofline: %.1f tok/s | decode batch 1 at %.1f%% of roofline (weights only); "
        "weights + K/V at %.1f%% of the bandwidth\n",
        r.roofline_tok_per_s, 100.0 * r.roofline_fraction, 100.0 * r.bandwidth_fraction);
  }
  if (!r.cache_compare.empty()) {
    std::printf("\n%8s %14s %16s %10s\n", "context", "cached ms/tok", "no-cache ms/tok", "reduction");
    for (const CacheCompareRow& c : r.cache_compare)
      std::printf("%8lld %14.3f %16.3f %9.1f%%\n", (long long)c.context, c.cached_ms, c.uncached_ms,
                  c.reduction_pct);
    for (const CacheCompareRow& c : r.cache_compare)
      if (c.cached_phases.runs > 0)
        std::printf("phases at %5lld, ms/tok cached (mean): %s\n", (long long)c.context,
                    phases_text(c.cached_phases).c_str());
  }
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("bench", "measure prefill/decode throughput, memory bandwidth and the roofline");
  struct Opts {
    BenchOptions bench;
    std::string batches = "1,4,8";
    std::string kv_type = "f32";
    std::string kv_type_k, kv_type_v;  // "" = kv_type
    std::string bw_buffer;
    bool json = false;
    bool no_bandwidth = false;
    ServerBenchFlags server;  // --server mode (bench_server.h)
  };
  auto o = std::make_shared<Opts>();
  // Required unless --server selects the load-generator mode (checked when run).
  cmd->add_option("-m,--model", o->bench.model_path, "GGUF model file");
  cmd->add_option("--prompt", o->bench.prompt_tokens, "prompt tokens (prefill length, decode context)")
      ->capture_default_str();
  cmd->add_option("--gen", o->bench.gen_tokens, "decode steps per batch size")->capture_default_str();
  cmd->add_option("--batch", o->batches, "comma-separated decode batch sizes")->capture_default_str();
  cmd->add_option("--repeat", o->bench.repeat, "timed repetitions (best and median reported)")
      ->capture_default_str();
  add_threads_flag(cmd, &o->bench.threads, "worker threads (default: one per core)");
  cmd->add_option("--kv-type", o->kv_type, "KV cache element type of K and V: f32, f16, bf16, q8_0 or q4_0")
      ->capture_default_str();
  cmd->add_option("--kv-type-k", o->kv_type_k, "K cache element type (overrides --kv-type)");
  cmd->add_option("--kv-type-v", o->kv_type_v, "V cache element type (overrides --kv-type)");
  add_block_size_flag(cmd, &o->bench.block_size);
  cmd->add_option("--bw-buffer", o->bw_buffer, "bandwidth probe buffer (e.g. 1GiB; default: 1 GiB)");
  cmd->add_flag("--no-bandwidth", o->no_bandwidth, "skip the bandwidth probe (and the roofline)");
  cmd->add_flag("--cache-compare", o->bench.cache_compare,
                "per-token latency with and without the KV cache at contexts 128/512/1024/2048");
  cmd->add_flag(
      "--phases", o->bench.phases,
      "also split each decode step (and --cache-compare's cached tokens) by phase of the forward pass");
  cmd->add_flag("--json", o->json, "print one JSON object instead of the table");
  add_server_bench_flags(cmd, &o->server);
  CLI::Option* gen_opt = cmd->get_option("--gen");

  return [o, gen_opt]() -> int {
    BenchOptions& b = o->bench;
    if (!o->server.server.empty())  // 64 generated tokens unless --gen says otherwise
      return run_server_bench(o->server, gen_opt->count() > 0 ? b.gen_tokens : 64, o->json);
    if (b.model_path.empty()) {
      std::fprintf(stderr, "error: bench needs -m MODEL (or --server URL for the load generator)\n");
      return 2;
    }
    std::vector<int32_t> batches;
    if (!parse_token_list(o->batches, &batches)) {
      std::fprintf(stderr, "error: --batch must be a comma-separated list of positive integers\n");
      return 2;
    }
    b.batch_sizes.assign(batches.begin(), batches.end());
    auto kv = parse_kv_dtype(o->kv_type);
    if (!kv.ok()) {
      std::fprintf(stderr, "error: --kv-type: %s\n", kv.status().message().c_str());
      return 2;
    }
    b.kv_type = *kv;
    for (auto [text, flag, field] : {std::tuple{&o->kv_type_k, "--kv-type-k", &b.kv_type_k},
                                     std::tuple{&o->kv_type_v, "--kv-type-v", &b.kv_type_v}}) {
      if (text->empty()) continue;
      auto t = parse_kv_dtype(*text);
      if (!t.ok()) {
        std::fprintf(stderr, "error: %s: %s\n", flag, t.status().message().c_str());
        return 2;
      }
      *field = *t;
    }
    if (!o->bw_buffer.empty()) {
      auto bytes = parse_bytes(o->bw_buffer);
      if (!bytes.ok()) {
        std::fprintf(stderr, "error: --bw-buffer: %s\n", bytes.status().message().c_str());
        return 2;
      }
      b.bandwidth_bytes = size_t(*bytes);
    }
    b.measure_bandwidth = !o->no_bandwidth;
    auto bench = Benchmark::create(b);
    if (!bench.ok()) {
      std::fprintf(stderr, "error: %s\n", bench.status().message().c_str());
      return bench.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (!o->json) std::fprintf(stderr, "benchmarking %s ...\n", b.model_path.c_str());
    auto rep = (*bench)->run_all();
    if (!rep.ok()) {
      std::fprintf(stderr, "error: %s\n", rep.status().message().c_str());
      return 1;
    }
    if (o->json)
      std::printf("%s\n", to_json(*rep).dump(2).c_str());
    else
      print_table(*rep, b.repeat);
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_bench, 100);

}  // namespace kvserve::cli

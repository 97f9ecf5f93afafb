// kvserve synth: writes a random-weight GGUF with a real model's shapes (see src/model/synth.h).
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "model/synth.h"
#include "util/units.h"

namespace kvserve::cli {

Runner add_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "write a random-weight model with a preset's shapes");
  struct Opts {
    std::string preset;
    std::string type = "q8_0";
    std::string out;
    std::string vocab = "../shared/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf";
    uint64_t seed = 0;
    int threads = 0;
    bool quiet = false;
  };
  auto o = std::make_shared<Opts>();
  std::string presets;
  for (const std::string& n : synth_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  cmd->add_option("--preset", o->preset, "model shapes: " + presets)->required();
  cmd->add_option("--type", o->type, "weight encoding: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k_m, q5_k_m, q6_k")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->out, "output GGUF path")->required();
  cmd->add_option("--vocab", o->vocab, "vocab GGUF whose tokenizer is copied")->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  add_threads_flag(cmd, &o->threads, "worker threads (0 = one per core)");
  cmd->add_flag("-q,--quiet", o->quiet, "no per-tensor lines");

  return [o]() -> int {
    auto spec = synth_preset(o->preset);
    if (!spec.ok()) {
      std::fprintf(stderr, "error: %s\n", spec.status().message().c_str());
      return 2;
    }
    auto scheme = parse_quant_scheme(o->type);
    if (!scheme.ok()) {
      std::fprintf(stderr, "error: %s\n", scheme.status().message().c_str());
      return 2;
    }
    SynthOptions so;
    so.vocab_path = o->vocab;
    so.seed = o->seed;
    so.threads = o->threads;
    const auto t0 = std::chrono::steady_clock::now();
    const bool quiet = o->quiet;
    auto res = synth_model(*spec, *scheme, so, o->out, [quiet](const SynthTensor& t) {
      if (quiet) return;
      std::string shape;
      for (int64_t d : t.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      std::printf("%-28s [%s] %s\n", t.name.c_str(), shape.c_str(), ggml_type_name(t.type));
    });
    if (!res.ok()) {
      std::fprintf(stderr, "error: %s\n", res.status().message().c_str());
      return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: preset %s, type %s, %lld parameters, n_vocab %d, %llu bytes (%s) in %.1f s\n",
                o->out.c_str(), spec->name.c_str(), scheme->name.c_str(), (long long)res->num_params, res->n_vocab,
                (unsigned long long)res->file_bytes, format_bytes(res->file_bytes).c_str(), secs);
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_synth, 80);

}  // namespace kvserve::cli

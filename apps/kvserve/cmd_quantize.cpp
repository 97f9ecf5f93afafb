// kvserve quantize: re-encodes a GGUF model's weight matrices (see src/model/quantize_model.h).
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "model/quantize_model.h"
#include "util/units.h"

namespace kvserve::cli {

Runner add_quantize(CLI::App& app) {
  auto* cmd = app.add_subcommand("quantize", "re-encode a model's weights (f32 f16 bf16 q8_0 q4_0 q5_0 q4_k_m q5_k_m q6_k)");
  struct Opts {
    std::string in, out, type;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("input", o->in, "input GGUF")->required();
  cmd->add_option("output", o->out, "output GGUF")->required();
  cmd->add_option("type", o->type, "target encoding")->required();
  add_threads_flag(cmd, &o->threads, "worker threads (0 = one per core)");

  return [o]() -> int {
    auto scheme = parse_quant_scheme(o->type);
    if (!scheme.ok()) {
      std::fprintf(stderr, "error: %s\n", scheme.status().message().c_str());
      return 2;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto res = quantize_model(o->in, o->out, *scheme, o->threads, [](const TensorReport& r) {
      std::string shape;
      for (int64_t d : r.ne) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      std::printf("%-28s [%s] %s -> %s, %s\n", r.name.c_str(), shape.c_str(), ggml_type_name(r.from),
                  ggml_type_name(r.to), format_bytes(r.bytes_out).c_str());
    });
    if (!res.ok()) {
      std::fprintf(stderr, "error: %s\n", res.status().message().c_str());
      return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("quantized %lld tensors to %s: tensor data %s -> %s, file %s (%llu bytes) in %.2f s\n",
                (long long)res->num_tensors, scheme->name.c_str(), format_bytes(res->bytes_in).c_str(),
                format_bytes(res->bytes_out).c_str(), format_bytes(res->file_bytes).c_str(),
                (unsigned long long)res->file_bytes, secs);
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_quantize, 90);

}  // namespace kvserve::cli

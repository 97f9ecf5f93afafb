// kvserve inspect: a GGUF file's metadata, tensors, and the KV cache cost of its model.
#include <cstdio>

#include "commands.h"
#include "kvcache/kv_layout.h"
#include "model/hparams.h"
#include "util/units.h"

namespace kvserve::cli {

Runner add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "print a GGUF file's metadata, tensors and KV bytes per token");
  auto path = std::make_shared<std::string>();
  auto full = std::make_shared<bool>(false);
  cmd->add_option("path", *path, "GGUF file")->required();
  cmd->add_flag("--full", *full, "print arrays in full");

  return [path, full]() -> int {
    auto file = GgufFile::open(*path);
    if (!file.ok()) {
      std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
      return 1;
    }
    const GgufFile& f = **file;
    std::printf("file: %s\nGGUF version: %u, alignment: %zu, size: %zu bytes (%s)\n", f.path().c_str(), f.version(),
                f.alignment(), f.file_size(), format_bytes(f.file_size()).c_str());
    std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
    for (const auto& [key, value] : f.metadata())
      std::printf("  %-48s %-8s %s\n", key.c_str(), gguf_value_type_name(value.type),
                  value.to_string(*full ? SIZE_MAX : 8).c_str());
    std::printf("\ntensors (%zu):\n", f.tensors().size());
    size_t total = 0;
    for (const auto& t : f.tensors()) {
      std::printf("  %-40s %-6s %-22s %12zu bytes\n", t.name.c_str(), ggml_type_name(t.type), t.shape_string().c_str(),
                  t.nbytes);
      total += t.nbytes;
    }
    std::printf("  total tensor data: %zu bytes (%s)\n", total, format_bytes(total).c_str());

    auto hp = load_hparams(f);
    if (!hp.ok()) {
      std::printf("\nno runnable model: %s\n", hp.status().message().c_str());
      return 0;
    }
    std::printf("\nmodel: arch %s, %d layers, hidden %d, %d heads, %d KV heads, head dim %d, ffn %d, context %d\n",
                hp->arch.c_str(), hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff,
                hp->n_ctx_train);
    std::printf("KV bytes per token (2 x layers x kv_heads x head row bytes; q8_0/q4_0 rows include their scales):\n");
    for (KvDType dt : kAllKvDTypes) {
      KvLayout L;
      L.num_layers = hp->n_layer;
      L.num_kv_heads = hp->n_head_kv;
      L.head_dim = hp->head_dim;
      L.set_dtype(dt);
      size_t per_tok = L.bytes_per_token();
      std::printf("  %-4s %10zu bytes/token, %s for a full %d-token context\n", kv_dtype_name(dt), per_tok,
                  format_bytes(per_tok * size_t(hp->n_ctx_train)).c_str(), hp->n_ctx_train);
    }
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_inspect, 70);

}  // namespace kvserve::cli

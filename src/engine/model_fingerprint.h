// The prefix-cache namespace of a loaded model: two processes (or two restarts) share cached K/V
// only when this says the K/V would be bit-identical.
#pragma once

#include <string>

#include "kvcache/block_pool.h"
#include "model/model.h"

namespace kvserve {

// XXH3-128 over the GGUF file's header (metadata and tensor infos: architecture, shapes, types),
// every tensor's bytes (the weights' checksum), and the run-time settings that change K/V
// although the file does not (rope parameters as loaded). Reads the whole mapped file once,
// at load time (~10 ms per 100 MiB).
BlockHash model_fingerprint(const Model& model);

// The namespace of one request's blocks: the fingerprint, the KV layout's type signature (KV
// element types and block size: blocks of another layout are not interchangeable) and the
// tenant's cache_salt ("" for none), hashed together.
BlockHash prefix_namespace(const BlockHash& fingerprint, const std::string& kv_signature,
                           const std::string& cache_salt);

}  // namespace kvserve

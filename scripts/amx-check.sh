#!/usr/bin/env bash
# Checks the AMX tile GEMM (src/kernels/gemm_packed_amx.cpp) on a machine that has AMX-INT8 but
# not this project's build dependencies (a borrowed test machine, say), using binaries built here.
#
#   scripts/amx-check.sh prepare   # here, after `cmake --build build` (with KVS_BUILD_BENCH=ON):
#                                  # copies the binaries' non-libc shared libraries and the
#                                  # tokenizer vocab into build/amx-check/ (about 45 MiB)
#   scripts/amx-check.sh run       # there, from the repository root, with build/bin and
#                                  # build/amx-check copied over
#
# `run` prints: the CPU's AMX flags; the packed-GEMM unit tests (PackedMatmul.AmxIsBitIdenticalToAvx512
# must pass, not skip); one SmolLM layer on the avx512 vs amx tables (kvs_microbench); and
# `kvserve bench` prefill/decode of a synthesized smollm-135m Q8_0 and Q4_0 with
# KVSERVE_KERNELS=avx512 and amx alternating, on 2 threads and on all cores.
set -uo pipefail

dir=build/amx-check
case "${1:-}" in
  prepare)
    mkdir -p "$dir/lib"
    for bin in build/bin/kvserve build/bin/kvs_microbench; do
      ldd "$bin" | awk '/=>/ {print $3}' | grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux)[.-]' |
        while read -r lib; do cp -L "$lib" "$dir/lib/"; done
    done
    cp ../shared/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf "$dir/vocab.gguf"
    du -sh "$dir"
    ;;
  run)
    export LD_LIBRARY_PATH="$PWD/$dir/lib"
    bin=build/bin
    grep -o -w 'amx_[a-z0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '
    echo "| $(nproc) cores"
    "$bin/test_unit_kernels" --gtest_filter='*Packed*:*Matmul*:*Gemm*' 2>&1 | grep -E '^\[  (PASSED|FAILED|SKIPPED) ' | head -20
    "$bin/kvs_microbench" --benchmark_filter='BM_smollm_layer/0/(8|512)/(3|4)/1' --benchmark_min_time=0.2 2>&1 | grep -E '^BM_'
    for t in q8_0 q4_0; do
      "$bin/kvserve" synth --preset smollm-135m --type "$t" -o "/tmp/amx-check-$t.gguf" --vocab "$dir/vocab.gguf" | tail -1
    done
    for t in q8_0 q4_0; do
      for threads in 2 "$(nproc)"; do
        for k in avx512 amx avx512 amx; do
          echo "== $t, $threads threads, KVSERVE_KERNELS=$k"
          KVSERVE_KERNELS=$k "$bin/kvserve" bench -m "/tmp/amx-check-$t.gguf" --prompt 512 --gen 16 --batch 1 \
            --repeat 2 --no-bandwidth -t "$threads" 2>&1 | grep -E 'kernels|prefill|decode batch'
        done
      done
    done
    ;;
  *)
    echo "usage: $0 prepare|run" >&2
    exit 2
    ;;
esac

// Byte layouts of the ggml quantized block formats that GGUF weights use.
//
// Every block encodes a fixed number of consecutive elements of one row; a row of n elements is
// n / kBlockElems consecutive blocks with no padding in between. All multi-byte fields are
// little-endian; fp16 fields are IEEE half precision (see util/half.h). The structs below have
// exactly the on-disk layout (checked by static_assert), so a row in a mapped file can be read
// through a `const BlockX*` directly. They are aggregates of byte-sized or 16-bit fields only, so
// their alignment is at most 2 (Q8_K, an activation-only format, has a float and needs 4).
//
// "Legacy" formats (32 elements per block):
//   value = d * q (+ m for the _1 variants), q an integer of 4, 5 or 8 bits.
// "K-quants" (256 elements per super-block, QK_K): the super-block is cut into sub-blocks of 16 or
//   32 elements; each sub-block has a small integer scale (and min) that is itself multiplied by a
//   per-super-block fp16 factor: value = d * sc_j * q - dmin * m_j.
#pragma once

#include <cstdint>

namespace kvserve {

constexpr int kQK = 32;     // elements per legacy block
constexpr int kQK_K = 256;  // elements per k-quant super-block
constexpr int kKScaleBytes = 12;  // packed 6-bit scales/mins of Q4_K and Q5_K (8 + 8 values)

// Q4_0 (18 bytes): d:f16 | qs[16]
//   qs[j] low nibble = element j, high nibble = element j + 16; value = d * (nibble - 8).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block must be 18 bytes");

// Q4_1 (20 bytes): d:f16 | m:f16 | qs[16]; value = d * nibble + m (nibbles laid out as Q4_0).
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block must be 20 bytes");

// Q5_0 (22 bytes): d:f16 | qh[4] | qs[16]
//   The low 4 bits come from qs as in Q4_0; bit j of the little-endian 32-bit word qh is the fifth
//   bit of element j. value = d * (q5 - 16).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block must be 22 bytes");

// Q5_1 (24 bytes): d:f16 | m:f16 | qh[4] | qs[16]; value = d * q5 + m (bits laid out as Q5_0).
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block must be 24 bytes");

// Q8_0 (34 bytes): d:f16 | qs[32] int8; value = d * qs[j]. Also the activation format for
// Q4_0/Q5_0/Q8_0 weights.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block must be 34 bytes");

// Q8_1 (36 bytes): d:f16 | s:f16 | qs[32] int8; s = d * sum(qs), so that a dot with a weight block
// carrying a min m can add m * s instead of touching the elements. Activation format for Q4_1/Q5_1.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36, "q8_1 block must be 36 bytes");

// Q2_K (84 bytes): scales[16] | qs[64] | d:f16 | dmin:f16
//   16 sub-blocks of 16. scales[j] low nibble = scale of sub-block j, high nibble = its min.
//   qs: two halves of 128 elements, 32 bytes each; in half h, bits 2s..2s+1 of byte qs[32h + l]
//   hold element 128h + 32s + l (s = 0..3, l = 0..31), so sub-block = 8h + 2s + l / 16.
//   value = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4).
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "q2_K block must be 84 bytes");

// Q3_K (110 bytes): hmask[32] | qs[64] | scales[12] | d:f16
//   Low two bits in qs exactly as Q2_K; the third bit of element 128h + 32s + l is bit 4h + s of
//   hmask[l]. q3 = low2 + 4 * bit - 4 (so a cleared mask bit means "subtract 4").
//   16 signed 6-bit scales packed in 12 bytes: low 4 bits of scale i are scales[i] & 15 (i < 8) or
//   scales[i - 8] >> 4 (i >= 8); the high 2 bits are bits 2*(i/4).. of scales[8 + i % 4]; the
//   stored value is offset by 32. value = d * (sc_i - 32) * q3.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "q3_K block must be 110 bytes");

// Q4_K (144 bytes): d:f16 | dmin:f16 | scales[12] | qs[128]
//   8 sub-blocks of 32 with 6-bit scale and 6-bit min each, packed (see unpack_scale_min_k4):
//   j < 4: scale = scales[j] & 63, min = scales[j + 4] & 63;
//   j >= 4: scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
//           min   = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
//   qs: four chunks of 32 bytes; chunk c low nibbles = sub-block 2c, high nibbles = 2c + 1.
//   value = d * scale_j * q - dmin * min_j.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "q4_K block must be 144 bytes");

// Q5_K (176 bytes): d:f16 | dmin:f16 | scales[12] | qh[32] | qs[128]
//   As Q4_K plus a fifth bit: element 32j + l (sub-block j) takes bit j of qh[l].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "q5_K block must be 176 bytes");

// Q6_K (210 bytes): ql[128] | qh[64] | scales[16] int8 | d:f16
//   16 sub-blocks of 16 with signed 8-bit scales. Two halves of 128 elements; half h uses
//   ql[64h .. 64h+63] and qh[32h .. 32h+31]. For l = 0..31 in half h:
//     element 128h +      l: ql[64h + l]      & 15 | (qh[32h + l] >> 0 & 3) << 4
//     element 128h + 32 + l: ql[64h + 32 + l] & 15 | (qh[32h + l] >> 2 & 3) << 4
//     element 128h + 64 + l: ql[64h + l]      >> 4 | (qh[32h + l] >> 4 & 3) << 4
//     element 128h + 96 + l: ql[64h + 32 + l] >> 4 | (qh[32h + l] >> 6 & 3) << 4
//   value = d * scales[element / 16] * (q6 - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "q6_K block must be 210 bytes");

// Q8_K (292 bytes): d:f32 | qs[256] int8 | bsums[16] int16
//   Activation format for the k-quant dot products. bsums[j] = sum of qs[16j .. 16j+15]; they let a
//   dot product apply sub-block mins and constant offsets without touching the elements.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "q8_K block must be 292 bytes");

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = uint8_t((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
    *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Unpacks the 16 signed scales (already minus 32) of a Q3_K block.
inline void unpack_scales_q3_k(const uint8_t* packed, int8_t out[16]) {
  for (int i = 0; i < 16; ++i) {
    int low = i < 8 ? (packed[i] & 15) : (packed[i - 8] >> 4);
    int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = int8_t((low | (high << 4)) - 32);
  }
}

}  // namespace kvserve

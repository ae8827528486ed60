// Dequantization of hand-built blocks: every expected number below was
// worked out from the block layout (REFERENCE.md, llama.cpp's
// dequantize_row_*) by hand, not by running our code. The bit patterns are
// chosen so that a swapped nibble, a wrong qh bit, a K-quant scale taken
// from the wrong sub-block or a 16-element group off by one changes the
// result. (During development the same decoders also matched gguf-py's
// numpy dequantizers bit for bit on random blocks and on the default
// model's tensors.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "flashscope/gguf.hpp"
#include "support/gguf_builder.hpp"

using flashscope::dequantize_row;
using flashscope::GgmlType;
using flashscope::StatusCode;

namespace {

using Bytes = std::vector<uint8_t>;

// fp16 bit patterns used below.
constexpr uint16_t kHalfOne = 0x3C00;        // 1.0
constexpr uint16_t kHalfTwo = 0x4000;        // 2.0
constexpr uint16_t kHalfHalf = 0x3800;       // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;    // 0.25
constexpr uint16_t kHalfEighth = 0x3000;     // 0.125
constexpr uint16_t kHalfMinusOne = 0xBC00;   // -1.0
constexpr uint16_t kHalfOneAndHalf = 0x3E00;  // 1.5

void put_u16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xff);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

std::vector<float> run(GgmlType type, const Bytes& block, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  const flashscope::Status s = dequantize_row(type, block.data(), out.data(), n);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return out;
}

void check_all(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == want[i]);  // exact: every expected value is representable
  }
}

// 32-element blocks whose byte j holds low nibble `lo` and high nibble `hi`.
uint8_t nibbles(int lo, int hi) { return static_cast<uint8_t>(lo | hi << 4); }

}  // namespace

TEST_CASE("dequant: F32, F16 and BF16 convert exactly") {
  const float f32[4] = {1.5f, -0.0f, 3.0e-38f, -65536.0f};
  Bytes b(sizeof f32);
  std::memcpy(b.data(), f32, sizeof f32);
  check_all(run(GgmlType::kF32, b, 4), {1.5f, -0.0f, 3.0e-38f, -65536.0f});

  // fp16: one, minus two, a half, the largest finite, the smallest
  // subnormal (2^-24), minus zero, +inf, and 0x3555 = 1.0101010101b * 2^-2.
  Bytes h(16);
  const uint16_t halves[8] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x3555};
  for (int i = 0; i < 8; ++i) put_u16(h, 2 * i, halves[i]);
  const std::vector<float> got = run(GgmlType::kF16, h, 8);
  check_all(got, {1.0f, -2.0f, 0.5f, 65504.0f, 5.9604644775390625e-08f, -0.0f,
                  std::numeric_limits<float>::infinity(), 0.333251953125f});
  CHECK(std::signbit(got[5]));

  // bf16 is the top half of an f32: 0x3F80 = 1, 0xC040 = -3, 0x4049 =
  // 3.140625, 0xFF80 = -inf, 0x3F81 = 1 + 2^-7.
  Bytes bf(10);
  const uint16_t bfs[5] = {0x3F80, 0xC040, 0x4049, 0xFF80, 0x3F81};
  for (int i = 0; i < 5; ++i) put_u16(bf, 2 * i, bfs[i]);
  check_all(run(GgmlType::kBF16, bf, 5),
            {1.0f, -3.0f, 3.140625f, -std::numeric_limits<float>::infinity(), 1.0078125f});
}

TEST_CASE("dequant: Q4_0 block, low nibbles are elements 0..15, high nibbles 16..31") {
  // d = 0.5; byte j = (lo j, hi 15-j); x = (nibble - 8) * d.
  Bytes b(18);
  put_u16(b, 0, kHalfHalf);
  for (int j = 0; j < 16; ++j) b[2 + j] = nibbles(j, 15 - j);
  check_all(run(GgmlType::kQ4_0, b, 32),
            {-4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5,
             3.5, 3, 2.5, 2, 1.5, 1, 0.5, 0, -0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4});
}

TEST_CASE("dequant: Q4_0 rows of several blocks use each block's own scale") {
  Bytes b(36);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 18, kHalfTwo);
  for (int j = 0; j < 16; ++j) {
    b[2 + j] = nibbles(9, 9);     // block 0: (9 - 8) * 1 = 1
    b[20 + j] = nibbles(0, 15);   // block 1: (0 - 8) * 2 = -16, (15 - 8) * 2 = 14
  }
  const std::vector<float> got = run(GgmlType::kQ4_0, b, 64);
  CHECK(got[0] == 1.0f);
  CHECK(got[31] == 1.0f);
  CHECK(got[32] == -16.0f);
  CHECK(got[47] == -16.0f);
  CHECK(got[48] == 14.0f);
  CHECK(got[63] == 14.0f);
}

TEST_CASE("dequant: Q4_1 block adds the fp16 min") {
  // d = 0.25, m = -1; byte j = (lo 15-j, hi j); x = nibble * d + m.
  Bytes b(20);
  put_u16(b, 0, kHalfQuarter);
  put_u16(b, 2, kHalfMinusOne);
  for (int j = 0; j < 16; ++j) b[4 + j] = nibbles(15 - j, j);
  check_all(run(GgmlType::kQ4_1, b, 32),
            {2.75, 2.5, 2.25, 2, 1.75, 1.5, 1.25, 1, 0.75, 0.5, 0.25, 0, -0.25, -0.5, -0.75, -1,
             -1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75});
}

TEST_CASE("dequant: Q5_0 block takes element j's fifth bit from bit j of qh") {
  // d = 2; byte j = (lo j, hi 15-j); qh = 0x12345678, whose bits 0..31 are
  //   0001 1110 0110 1010 | 0010 1100 0100 1000  (bit 0 first)
  // x = ((nibble | bit << 4) - 16) * d. E.g. element 3: (3 | 16) - 16 = 3 -> 6;
  // element 16: hi nibble of byte 0 is 15, bit 16 is 0 -> (15 - 16) * 2 = -2.
  Bytes b(22);
  put_u16(b, 0, kHalfTwo);
  put_u32(b, 2, 0x12345678u);
  for (int j = 0; j < 16; ++j) b[6 + j] = nibbles(j, 15 - j);
  check_all(run(GgmlType::kQ5_0, b, 32),
            {-32, -30, -28, 6, 8, 10, 12, -18, -16, 18, 20, -10, 24, -6, 28, -2,
             -2, -4, 26, -8, 22, 20, -14, -16, -18, 12, -22, -24, 6, -28, -30, -32});
}

TEST_CASE("dequant: Q5_1 block with min and qh") {
  // d = 0.5, m = 1.5; qh = 0xF00F0FF0: bits 4..11, 16..19 and 28..31 set;
  // byte j = (lo 15-j, hi j); x = (nibble | bit << 4) * d + m.
  // E.g. element 4: (11 | 16) * 0.5 + 1.5 = 15; element 16: 0 | 16 -> 9.5.
  Bytes b(24);
  put_u16(b, 0, kHalfHalf);
  put_u16(b, 2, kHalfOneAndHalf);
  put_u32(b, 4, 0xF00F0FF0u);
  for (int j = 0; j < 16; ++j) b[8 + j] = nibbles(15 - j, j);
  check_all(run(GgmlType::kQ5_1, b, 32),
            {9, 8.5, 8, 7.5, 15, 14.5, 14, 13.5, 13, 12.5, 12, 11.5, 3, 2.5, 2, 1.5,
             9.5, 10, 10.5, 11, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 15.5, 16, 16.5, 17});
}

TEST_CASE("dequant: Q8_0 block, signed bytes times d") {
  // d = 0.125; q[j] = (j - 16) * 4, except q[0] = -128 and q[31] = 127.
  Bytes b(34);
  put_u16(b, 0, kHalfEighth);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>((j - 16) * 4));
  b[2] = static_cast<uint8_t>(int8_t{-128});
  b[33] = 127;
  check_all(run(GgmlType::kQ8_0, b, 32),
            {-16, -7.5, -7, -6.5, -6, -5.5, -5, -4.5, -4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5,
             0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 15.875});
}

TEST_CASE("dequant: Q4_K unpacks eight distinct 6-bit scales and mins") {
  // d = 1, dmin = 0.5. Sub-block i (elements 32i..32i+31) has
  //   sc = {1, 2, 3, 63, 17, 34, 51, 60},  m = {0, 5, 10, 15, 36, 9, 25, 47}
  // packed by hand into 12 bytes (get_scale_min_k4's layout):
  //   bytes 0..3:  sc0..3 | (sc4..7 >> 4) << 6   = 0x41 0x82 0xC3 0xFF
  //   bytes 4..7:  m0..3  | (m4..7 >> 4) << 6    = 0x80 0x05 0x4A 0x8F
  //   bytes 8..11: (sc4..7 & 15) | (m4..7 & 15) << 4 = 0x41 0x92 0x93 0xFC
  // The top bits of sc4..7 (1 2 3 3) and m4..7 (2 0 1 2) differ everywhere,
  // so reading one's from the other's byte shows.
  // x = (d * sc) * q - dmin * m.
  Bytes b(144, 0);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2, kHalfHalf);
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xFF, 0x80, 0x05, 0x4A, 0x8F, 0x41, 0x92, 0x93, 0xFC};
  std::memcpy(b.data() + 4, scales, 12);
  // qs: 4 chunks of 32 bytes; chunk c's low nibbles are sub-block 2c, its
  // high nibbles sub-block 2c+1. All zero except:
  uint8_t* qs = b.data() + 16;
  qs[0] = 0x5A;    // element 0 = 10 (sub 0), element 32 = 5 (sub 1)
  qs[31] = 0x3C;   // element 31 = 12 (sub 0), element 63 = 3 (sub 1)
  qs[32] = 0x71;   // element 64 = 1 (sub 2), element 96 = 7 (sub 3)
  qs[70] = 0x8B;   // element 134 = 11 (sub 4), element 166 = 8 (sub 5)
  qs[100] = 0x2E;  // element 196 = 14 (sub 6), element 228 = 2 (sub 7)
  qs[127] = 0xF9;  // element 223 = 9 (sub 6), element 255 = 15 (sub 7)
  const std::vector<float> got = run(GgmlType::kQ4_K, b, 256);

  // Elements with q = 0 are -dmin * m of their sub-block.
  const float base[8] = {0, -2.5f, -5, -7.5f, -18, -4.5f, -12.5f, -23.5f};
  struct Spot {
    int index;
    float value;
  };
  const Spot spots[] = {
      {0, 1 * 10 - 0.0f},      {31, 1 * 12 - 0.0f},     {32, 2 * 5 - 2.5f},     {63, 2 * 3 - 2.5f},
      {64, 3 * 1 - 5.0f},      {96, 63 * 7 - 7.5f},     {134, 17 * 11 - 18.0f}, {166, 34 * 8 - 4.5f},
      {196, 51 * 14 - 12.5f},  {223, 51 * 9 - 12.5f},   {228, 60 * 2 - 23.5f},  {255, 60 * 15 - 23.5f},
  };
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = base[e / 32];
  for (const Spot& s : spots) want[s.index] = s.value;
  // Written out, to make the arithmetic above checkable at a glance:
  CHECK(want[96] == 433.5f);
  CHECK(want[134] == 169.0f);
  CHECK(want[166] == 267.5f);
  CHECK(want[196] == 701.5f);
  CHECK(want[255] == 876.5f);
  check_all(got, want);
}

TEST_CASE("dequant: Q5_K is Q4_K's sub-blocks with a fifth bit from qh") {
  // d = 1, dmin = 0.5; scales as in the Q4_K case above: sc {1, 2, 3, 63, 17, 34, 51, 60},
  // m {0, 5, 10, 15, 36, 9, 25, 47}. qh[32] at 16, qs[128] at 48.
  Bytes b(176, 0);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2, kHalfHalf);
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xFF, 0x80, 0x05, 0x4A, 0x8F, 0x41, 0x92, 0x93, 0xFC};
  std::memcpy(b.data() + 4, scales, 12);
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  qs[0] = 0x5A;   // element 0 low = 10 (sub 0), element 32 low = 5 (sub 1)
  qh[0] = 0x02;   // bit 1: element 32 (sub 1) gets +16
  qs[70] = 0x8B;  // element 134 low = 11 (sub 4), element 166 low = 8 (sub 5)
  qh[6] = 0x30;   // bits 4, 5: elements 134 (sub 4) and 166 (sub 5) get +16
  qh[31] = 0x80;  // bit 7: element 255 (sub 7, l = 31) = 16
  const std::vector<float> got = run(GgmlType::kQ5_K, b, 256);
  const float base[8] = {0, -2.5f, -5, -7.5f, -18, -4.5f, -12.5f, -23.5f};
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = base[e / 32];
  want[0] = 1 * 10 - 0.0f;
  want[32] = 2 * 21 - 2.5f;
  want[134] = 17 * 27 - 18.0f;
  want[166] = 34 * 24 - 4.5f;
  want[255] = 60 * 16 - 23.5f;
  check_all(got, want);
}

TEST_CASE("dequant: Q6_K groups of 16, ql/qh split in 128-element halves") {
  // d = 0.5; the 16 int8 scales, one per 16 elements in order:
  //   {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16}
  // x = (d * scale) * (q - 32), q = 4 low bits from ql, 2 high bits from qh.
  // Inside a half (ql 64 bytes, qh 32 bytes), element l + 32k (l < 32):
  //   low 4 bits: k=0 ql[l] & 15, k=1 ql[l+32] & 15, k=2 ql[l] >> 4, k=3 ql[l+32] >> 4
  //   high 2 bits: (qh[l] >> 2k) & 3
  Bytes b(210, 0);
  uint8_t* ql = b.data();
  uint8_t* qh = b.data() + 128;
  const int8_t scales[16] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16};
  std::memcpy(b.data() + 192, scales, 16);
  put_u16(b, 208, kHalfHalf);
  ql[0] = 0x21;        // element 0 low = 1, element 64 low = 2
  ql[33] = 0x43;       // element 33 low = 3, element 97 low = 4
  qh[0] = 0xE4;        // 11 10 01 00: elements 0, 32, 64, 96 high = 0, 1, 2, 3
  ql[64 + 5] = 0x7F;   // second half, l = 5: element 133 low = 15, element 197 low = 7
  qh[32 + 5] = 0x1B;   // 00 01 10 11: elements 133, 165, 197, 229 high = 3, 2, 1, 0
  const std::vector<float> got = run(GgmlType::kQ6_K, b, 256);

  // q = 0 everywhere else: x = 0.5 * scale * -32 = -16 * scale.
  const float base[16] = {-16, 32, -48, 64, -80, 96, -112, 128, -144, 160, -176, 192, -208, 224, -240, 256};
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = base[e / 16];
  want[0] = -15.5f;   // q = 1:           (1 - 32) * 0.5 * 1
  want[32] = -24.0f;  // q = 16:         (16 - 32) * 0.5 * 3   (group 2)
  want[33] = -43.5f;  // q = 3:           (3 - 32) * 0.5 * 3
  want[64] = 5.0f;    // q = 2 | 32:     (34 - 32) * 0.5 * 5   (group 4)
  want[96] = 56.0f;   // q = 48:         (48 - 32) * 0.5 * 7   (group 6)
  want[97] = -98.0f;  // q = 4:           (4 - 32) * 0.5 * 7
  want[133] = 139.5f; // q = 15 | 48:    (63 - 32) * 0.5 * 9   (group 8)
  want[165] = 0.0f;   // q = 32:         (32 - 32) * 0.5 * 11  (group 10)
  want[197] = -58.5f; // q = 7 | 16:     (23 - 32) * 0.5 * 13  (group 12)
  // element 229: q = 0, stays at the base -240 (group 14)
  check_all(got, want);
}

// Q2_K, Q3_K and Q5_K: every element gets its own quantized value and every
// group its own scale (and min), placed into the block by an encoder written
// from the layout (llama.cpp's block_q*_K and dequantize_row_q*_K), not from
// our decoder's loops. d = 0.5, dmin = 0.25: every expected value is exact.
namespace {

// Element e of a 256-element K block sits in half h = e / 128 at r = e % 128;
// Q2_K/Q3_K store its 2 low bits in qs[32h + r % 32] at bit 2 (r / 32).
void put_2bits(uint8_t* qs, int e, int q2) {
  const int h = e / 128, r = e % 128;
  qs[32 * h + r % 32] |= static_cast<uint8_t>((q2 & 3) << (2 * (r / 32)));
}

int pseudo(int e, int mod) { return (e * 37 + e / 7 + 11) % mod; }

}  // namespace

TEST_CASE("dequant: Q2_K, 16 groups with 4-bit scales and mins, 2-bit values") {
  Bytes b(84, 0);
  int sc[16], m[16];
  for (int g = 0; g < 16; ++g) {
    sc[g] = (g * 5 + 1) % 16;
    m[g] = (g * 3 + 2) % 16;
    b[g] = static_cast<uint8_t>(sc[g] | m[g] << 4);
  }
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int q = pseudo(e, 4);
    put_2bits(b.data() + 16, e, q);
    want[e] = 0.5f * sc[e / 16] * q - 0.25f * m[e / 16];
  }
  put_u16(b, 80, kHalfHalf);
  put_u16(b, 82, kHalfQuarter);
  check_all(run(GgmlType::kQ2_K, b, 256), want);
}

TEST_CASE("dequant: Q3_K, signed 6-bit scales split over 12 bytes, third bit in hmask") {
  Bytes b(110, 0);
  uint8_t* hmask = b.data();
  uint8_t* qs = b.data() + 32;
  uint8_t* packed = b.data() + 96;
  int scale[16];
  for (int g = 0; g < 16; ++g) {
    const int s6 = (g * 23 + 5) % 64;  // stored; the scale is s6 - 32
    scale[g] = s6 - 32;
    packed[g % 8] |= static_cast<uint8_t>(g < 8 ? (s6 & 15) : (s6 & 15) << 4);
    packed[8 + g % 4] |= static_cast<uint8_t>((s6 >> 4) << (2 * (g / 4)));
  }
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int q = pseudo(e, 8) - 4;  // -4..3, stored as q + 4: 2 bits in qs, the third in hmask
    put_2bits(qs, e, (q + 4) & 3);
    const int h = e / 128, r = e % 128;
    if ((q + 4) >> 2) hmask[r % 32] |= static_cast<uint8_t>(1 << (4 * h + r / 32));
    want[e] = 0.5f * static_cast<float>(scale[e / 16]) * static_cast<float>(q);
  }
  put_u16(b, 108, kHalfHalf);
  check_all(run(GgmlType::kQ3_K, b, 256), want);
}

TEST_CASE("dequant: Q5_K, Q4_K's scales and nibbles plus a fifth bit per element in qh") {
  Bytes b(176, 0);
  put_u16(b, 0, kHalfHalf);
  put_u16(b, 2, kHalfQuarter);
  uint8_t* packed = b.data() + 4;
  uint8_t* qh = b.data() + 16;
  uint8_t* qs = b.data() + 48;
  const int sc[8] = {1, 2, 3, 63, 17, 34, 51, 60};
  const int m[8] = {0, 5, 10, 15, 36, 9, 25, 47};
  for (int j = 0; j < 4; ++j) {  // get_scale_min_k4's packing
    packed[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    packed[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
    packed[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) {
    const int q = pseudo(e, 32);
    const int c = e / 64, r = e % 64;
    const bool high = r >= 32;
    qs[32 * c + r % 32] |= static_cast<uint8_t>(high ? (q & 15) << 4 : (q & 15));
    if (q >> 4) qh[r % 32] |= static_cast<uint8_t>(1 << (2 * c + (high ? 1 : 0)));
    want[e] = 0.5f * sc[e / 32] * q - 0.25f * m[e / 32];
  }
  check_all(run(GgmlType::kQ5_K, b, 256), want);
}

TEST_CASE("dequant: bad arguments and unsupported types") {
  Bytes block(144, 0);
  std::vector<float> out(256, 7.0f);

  flashscope::Status s = dequantize_row(GgmlType::kQ4_0, block.data(), out.data(), 33);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("block size 32") != std::string::npos);

  s = dequantize_row(GgmlType::kQ4_K, nullptr, out.data(), 256);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(dequantize_row(GgmlType::kQ4_K, block.data(), out.data(), -256).code() == StatusCode::kInvalidArgument);
  CHECK(dequantize_row(GgmlType::kQ8_0, nullptr, nullptr, 0).ok());

  s = dequantize_row(GgmlType::kIQ2_XXS, block.data(), out.data(), 256);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("IQ2_XXS") != std::string::npos);
  CHECK(out[0] == 7.0f);  // nothing written on failure

  s = dequantize_row(static_cast<GgmlType>(99), block.data(), out.data(), 32);
  CHECK(s.code() == StatusCode::kUnsupported);
  CHECK(s.message().find("99") != std::string::npos);
}

TEST_CASE("dequant: ggml type table") {
  CHECK(std::string(flashscope::ggml_type_name(GgmlType::kQ3_K)) == "Q3_K");
  CHECK(std::string(flashscope::ggml_type_name(GgmlType::kBF16)) == "BF16");
  CHECK(std::string(flashscope::ggml_type_name(static_cast<GgmlType>(4))) == "Q4_2 (removed)");
  CHECK(flashscope::ggml_type_name(static_cast<GgmlType>(1000)) == nullptr);

  struct Row {
    GgmlType type;
    int64_t block;
    int64_t bytes;
  };
  const Row rows[] = {{GgmlType::kF32, 1, 4},     {GgmlType::kF16, 1, 2},     {GgmlType::kBF16, 1, 2},
                      {GgmlType::kQ4_0, 32, 18},  {GgmlType::kQ4_1, 32, 20},  {GgmlType::kQ5_0, 32, 22},
                      {GgmlType::kQ5_1, 32, 24},  {GgmlType::kQ8_0, 32, 34},  {GgmlType::kQ4_K, 256, 144},
                      {GgmlType::kQ6_K, 256, 210}, {GgmlType::kQ5_K, 256, 176}, {GgmlType::kQ2_K, 256, 84},
                      {GgmlType::kQ3_K, 256, 110}};
  for (const Row& r : rows) {
    INFO(flashscope::ggml_type_name(r.type));
    CHECK(flashscope::ggml_block_size(r.type) == r.block);
    CHECK(flashscope::ggml_type_size(r.type) == r.bytes);
  }
  CHECK(flashscope::ggml_type_can_dequantize(GgmlType::kQ6_K));
  CHECK(flashscope::ggml_type_can_dequantize(GgmlType::kQ5_K));
  CHECK_FALSE(flashscope::ggml_type_can_dequantize(GgmlType::kQ8_K));
  CHECK(flashscope::ggml_type_can_dequantize(GgmlType::kQ2_K));
  CHECK(flashscope::ggml_type_can_dequantize(GgmlType::kQ3_K));
  CHECK(flashscope::ggml_block_size(static_cast<GgmlType>(31)) == 0);
}

TEST_CASE("dequant: dequantize_rows reads whole rows of a tensor in a GGUF") {
  // A 3-row Q8_0 tensor of 32 columns; row r has d = 1 and every q = r + 1.
  Bytes data(3 * 34, 0);
  for (int r = 0; r < 3; ++r) {
    put_u16(data, 34 * r, kHalfOne);
    for (int j = 0; j < 32; ++j) data[34 * r + 2 + j] = static_cast<uint8_t>(r + 1);
  }
  flashscope::testing::GgufBuilder builder;
  builder.add_tensor("w", GgmlType::kQ8_0, {32, 3}, data);
  auto file = flashscope::GgufFile::from_buffer(builder.build());
  REQUIRE_MESSAGE(file.ok(), file.status().message());
  const flashscope::GgufTensor* w = file.value().find_tensor("w");
  REQUIRE(w != nullptr);

  std::vector<float> rows(64, 0.0f);
  REQUIRE(flashscope::dequantize_rows(*w, 1, 2, rows.data()).ok());
  CHECK(rows[0] == 2.0f);
  CHECK(rows[31] == 2.0f);
  CHECK(rows[32] == 3.0f);
  CHECK(rows[63] == 3.0f);

  const flashscope::Status s = flashscope::dequantize_rows(*w, 2, 2, rows.data());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("'w'") != std::string::npos);
  CHECK(flashscope::dequantize_rows(*w, -1, 1, rows.data()).code() == StatusCode::kInvalidArgument);
}

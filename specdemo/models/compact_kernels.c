// Small-batch matrix products over fp32 weights kept in a compact form (see compact_linear.py).
//
// y[r, o] = sum_i x[r, i] * w[o, i] for r < rows (a decode step: 1 row; a verify: γ + 1 rows), where w is
// stored in blocks of 32 and expanded in registers to exactly the fp32 weight the model holds:
//   Q4_1: w = fl(d * q + m), q a 4-bit code, d and m fp16, as gguf-py dequantizes (d * q is exact in fp32:
//         11 bits times 4), so one rounding, at + m;
//   Q8_0: w = fl(q * d), q an int8 code, d fp16;
//   F16 / BF16: w = the half-precision value widened (exact).
// The weights are read once for all rows (torch's fp32 product at 1-3 rows reads them once per row),
// and each y[r, o] is summed in the same order whatever the number of rows: a verify's row is bit for
// bit the 1-row step's. Three builds of that order, by what the compiler is told the CPU has: AVX-512
// (16 lanes, two sums per row), AVX2 + FMA (8 lanes, one sum), or a plain loop; their sums differ from one
// another in the last bits (as two BLAS libraries' do), never between row counts on one machine.
#include <stdint.h>

enum { Q4_1 = 0, Q8_0 = 1, F16 = 2, BF16 = 3 };
#define BLOCK 32
#define MAX_ROWS 12  // rows per pass (their sums live in registers); more rows: more passes

static inline int64_t block_bytes(int kind) { return kind == Q4_1 ? 16 : kind == Q8_0 ? 32 : 64; }

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

static inline float sum_lanes(__m512 v) {  // a fixed order, whatever the caller: halves, then quarters, …
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// fp16 scales → fp32, 16 at a time (one conversion for 8 blocks' d and m, instead of two per block)
static inline void widen_scales(const uint16_t *half, int64_t n, float *full) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(full + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(half + i))));
  for (; i < n; ++i) full[i] = _cvtsh_ss(half[i]);
}

// One block's 32 weights as 2 vectors of 16 floats; scale = d, m as fp32.
static inline __attribute__((always_inline)) void expand_block(const int kind, const uint8_t *codes, const float *scale,
                                                               __m512 w[2]) {
  if (kind == Q4_1) {
    // the block's 16 possible weights fl(d * q + m), q = 0..15 (as gguf-py: d * q is exact, so one rounding),
    // each picked by its code: vpermps reads the low 4 bits of each lane, elements 0..15 then (>> 4) 16..31
    const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 table = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(scale[0]), q), _mm512_set1_ps(scale[1]));
    const __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)codes));
    w[0] = _mm512_permutexvar_ps(code, table);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(code, 4), table);
  } else if (kind == Q8_0) {
    const __m512 d = _mm512_set1_ps(scale[0]);
    for (int j = 0; j < 2; ++j) {
      const __m128i bytes = _mm_loadu_si128((const __m128i *)(codes + 16 * j));
      w[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), d);
    }
  } else if (kind == F16) {
    for (int j = 0; j < 2; ++j) w[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(codes + 32 * j)));
  } else {  // BF16: the upper half of an fp32
    for (int j = 0; j < 2; ++j) {
      const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(codes + 32 * j)));
      w[j] = _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    }
  }
}

#define CHUNK 64  // blocks whose scales are widened at once
// Output rows [o0, o1) for R rows of x, one output row at a time; `kind` is a constant in each copy (the
// compiler drops the other kinds' branches from the loop). Scales are widened 16 at a time and each Q4_1
// weight is picked from its block's 16-value table because the shuffle port, not memory, bounds this loop
// (docs/design.md, "Measured decisions", has the before/after and the variants not kept).
static inline __attribute__((always_inline)) void pass_kind(const int kind, const int R, const float *x, int64_t in,
                                                            const uint8_t *codes, const uint16_t *scales, float *y,
                                                            int64_t out, int64_t o0, int64_t o1) {
  const int64_t blocks = in / BLOCK, step = block_bytes(kind), per = kind == Q4_1 ? 2 : kind == Q8_0 ? 1 : 0;
  float scale[2 * CHUNK];
  for (int64_t o = o0; o < o1; ++o) {
    __m512 lo[MAX_ROWS], hi[MAX_ROWS];  // two sums per row (the block's two halves): 24 of the 32 registers
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < blocks; b0 += CHUNK) {
      const int64_t n = blocks - b0 < CHUNK ? blocks - b0 : CHUNK;
      widen_scales(scales + (o * blocks + b0) * per, n * per, scale);
      for (int64_t b = b0; b < b0 + n; ++b) {
        __m512 w[2];
        expand_block(kind, codes + (o * blocks + b) * step, scale + (b - b0) * per, w);
        for (int r = 0; r < R; ++r) {
          lo[r] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(x + r * in + b * BLOCK), lo[r]);
          hi[r] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(x + r * in + b * BLOCK + 16), hi[r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) y[r * out + o] = sum_lanes(_mm512_add_ps(lo[r], hi[r]));
  }
}

#define DEFINE_PASS(R)                                                                                     \
  static void pass_##R(int kind, const float *x, int64_t in, const uint8_t *codes, const uint16_t *scales, \
                       float *y, int64_t out, int64_t o0, int64_t o1) {                                   \
    switch (kind) {                                                                                      \
      case Q4_1: pass_kind(Q4_1, R, x, in, codes, scales, y, out, o0, o1); break;                         \
      case Q8_0: pass_kind(Q8_0, R, x, in, codes, scales, y, out, o0, o1); break;                         \
      case F16: pass_kind(F16, R, x, in, codes, scales, y, out, o0, o1); break;                           \
      default: pass_kind(BF16, R, x, in, codes, scales, y, out, o0, o1);                                  \
    }                                                                                                    \
  }
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float sum_lanes(__m256 v) {  // a fixed order, whatever the caller
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One block's 32 weights as 4 vectors of 8 floats; scales[2 * block] = d, m (fp16 bits).
static inline void expand_block(int kind, const uint8_t *codes, const uint16_t *scales, __m256 w[4]) {
  if (kind == Q4_1) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scales[0])), m = _mm256_set1_ps(_cvtsh_ss(scales[1]));
    const __m128i packed = _mm_loadu_si128((const __m128i *)codes);
    const __m128i nibble = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(packed, nibble);                      // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nibble);  // elements 16..31
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; ++j) {
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[j]));
      w[j] = _mm256_add_ps(_mm256_mul_ps(d, q), m);  // as gguf-py: d * q exact, then + m rounded
    }
  } else if (kind == Q8_0) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(scales[0]));
    for (int j = 0; j < 4; ++j) {
      const __m128i bytes = _mm_loadl_epi64((const __m128i *)(codes + 8 * j));
      w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), d);
    }
  } else if (kind == F16) {
    for (int j = 0; j < 4; ++j) w[j] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(codes + 16 * j)));
  } else {  // BF16: the upper half of an fp32
    for (int j = 0; j < 4; ++j) {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(codes + 16 * j)));
      w[j] = _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    }
  }
}

// Output rows [o0, o1) for R rows of x, one output row at a time: each block of it is expanded once and
// multiplied into every row of x, so each thread streams its output rows' codes in order. Working on
// 2–8 output rows together (more sums in flight) was slower on a 2-core EPYC: SmolLM2's 121 products
// at 1 / 2 / 3 / 4 rows took 16.0 / 16.8 / 17.7 / 19.8 ms this way against 21.4 / 22.0 / 24.0 / 27.3
// (`python -m scripts.probes.kernel_revisions --against <commit>`). The sums are the same either way.
// Two sums per row (even and odd blocks, or 8-lane groups: shorter chains of multiply-adds) took 1.0-2.5 ms
// off the 1-row step but, as the order must be the same for every row count, cost 1-8 ms from 6 rows on
// (24 sums do not fit 16 registers), so a tree's verify and a short prompt paid more than a step saved.
#define DEFINE_PASS(R)                                                                                     \
  static void pass_##R(int kind, const float *x, int64_t in, const uint8_t *codes, const uint16_t *scales, \
                       float *y, int64_t out, int64_t o0, int64_t o1) {                                   \
    const int64_t blocks = in / BLOCK, step = block_bytes(kind), per = kind == Q4_1 ? 2 : 1;             \
    for (int64_t o = o0; o < o1; ++o) {                                                                  \
      __m256 acc[R];                                                                                     \
      for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();                                          \
      for (int64_t b = 0; b < blocks; ++b) {                                                             \
        __m256 w[4];                                                                                     \
        expand_block(kind, codes + (o * blocks + b) * step, scales + (o * blocks + b) * per, w);         \
        for (int r = 0; r < R; ++r)                                                                      \
          for (int j = 0; j < 4; ++j)                                                                    \
            acc[r] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(x + r * in + b * BLOCK + 8 * j), acc[r]);     \
      }                                                                                                  \
      for (int r = 0; r < R; ++r) y[r * out + o] = sum_lanes(acc[r]);                                    \
    }                                                                                                    \
  }
#else
// Portable fallback (no AVX2 + FMA + F16C): the same weights, a plain loop.
static inline float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  union { uint32_t u; float f; } v;
  if (exp == 0) {
    v.f = (float)man * (1.0f / 16777216.0f);  // subnormal: man · 2⁻²⁴, exact
    v.u |= sign;
  } else {
    v.u = sign | (exp == 31 ? 0x7F800000 | (man << 13) : ((exp + 112) << 23) | (man << 13));
  }
  return v.f;
}

static inline float weight_at(int kind, const uint8_t *codes, const uint16_t *scales, int64_t j) {
  if (kind == Q4_1) {
    const uint8_t byte = codes[j % 16];
    const float dq = half_to_float(scales[0]) * (float)(j < 16 ? (byte & 0x0F) : (byte >> 4));
    return dq + half_to_float(scales[1]);
  }
  if (kind == Q8_0) return (float)((const int8_t *)codes)[j] * half_to_float(scales[0]);
  const uint16_t bits = ((const uint16_t *)codes)[j];
  if (kind == F16) return half_to_float(bits);
  union { uint32_t u; float f; } v = {(uint32_t)bits << 16};
  return v.f;
}

#define DEFINE_PASS(R)                                                                                     \
  static void pass_##R(int kind, const float *x, int64_t in, const uint8_t *codes, const uint16_t *scales, \
                       float *y, int64_t out, int64_t o0, int64_t o1) {                                   \
    const int64_t blocks = in / BLOCK, step = block_bytes(kind), per = kind == Q4_1 ? 2 : 1;             \
    for (int64_t o = o0; o < o1; ++o) {                                                                  \
      float acc[R] = {0};                                                                                \
      for (int64_t b = 0; b < blocks; ++b)                                                               \
        for (int64_t j = 0; j < BLOCK; ++j) {                                                            \
          const float w = weight_at(kind, codes + (o * blocks + b) * step, scales + (o * blocks + b) * per, j); \
          for (int r = 0; r < R; ++r) acc[r] += w * x[r * in + b * BLOCK + j];                           \
        }                                                                                                \
      for (int r = 0; r < R; ++r) y[r * out + o] = acc[r];                                               \
    }                                                                                                    \
  }
#endif

// up to 12 rows a pass: 12 sums and a block's 4 vectors within the 16 vector registers (x is read from
// memory by the multiply-add itself)
DEFINE_PASS(1)
DEFINE_PASS(2)
DEFINE_PASS(3)
DEFINE_PASS(4)
DEFINE_PASS(5)
DEFINE_PASS(6)
DEFINE_PASS(7)
DEFINE_PASS(8)
DEFINE_PASS(9)
DEFINE_PASS(10)
DEFINE_PASS(11)
DEFINE_PASS(12)

typedef void (*pass_fn)(int, const float *, int64_t, const uint8_t *, const uint16_t *, float *, int64_t, int64_t,
                        int64_t);
static const pass_fn PASSES[MAX_ROWS + 1] = {0,      pass_1, pass_2, pass_3, pass_4,  pass_5,  pass_6,
                                             pass_7, pass_8, pass_9, pass_10, pass_11, pass_12};

// x [rows, in] fp32; codes: the blocks' codes, row-major [out, in/32 blocks]; scales: fp16 bits, d (and m
// for Q4_1) per block, or unused; → y [rows, out]. ``threads`` OpenMP threads (1: no parallel region).
void compact_linear(int kind, const float *x, int64_t rows, int64_t in, const uint8_t *codes, const uint16_t *scales,
                    float *y, int64_t out, int threads) {
  const int64_t chunk = 16;  // output rows per task
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int64_t o0 = 0; o0 < out; o0 += chunk) {
    const int64_t o1 = o0 + chunk < out ? o0 + chunk : out;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_ROWS) {
      const int64_t n = rows - r0 < MAX_ROWS ? rows - r0 : MAX_ROWS;
      PASSES[n](kind, x + r0 * in, in, codes, scales, y + r0 * out, out, o0, o1);
    }
  }
}

int vectorized(void) {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  return 1;
#else
  return 0;
#endif
}

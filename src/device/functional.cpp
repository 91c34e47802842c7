#include "device/functional.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "device/validate.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

// float -> int32 the way a cast instruction would: round to nearest, saturate, NaN -> 0.
int32_t float_to_i32(float f) {
  if (std::isnan(f)) return 0;
  const float r = std::nearbyint(f);
  if (r >= 2147483647.0f) return std::numeric_limits<int32_t>::max();
  if (r <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(r);
}

void decode_run(const uint8_t* src, int64_t stride, int64_t n, DType t, float* out) {
  switch (t) {
    case DType::f32:
      if (stride == 4) {
        std::memcpy(out, src, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) std::memcpy(&out[i], src + i * stride, 4);
      }
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + i * stride, 2);
        out[i] = bf16_bits_to_float(b);
      }
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + i * stride, 2);
        out[i] = f16_bits_to_float(b);
      }
      return;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, src + i * stride, 4);
        out[i] = static_cast<float>(v);
      }
      return;
    case DType::boolean:
      for (int64_t i = 0; i < n; ++i) out[i] = src[i * stride] != 0 ? 1.0f : 0.0f;
      return;
  }
}

void encode_run(const float* in, int64_t n, DType t, uint8_t* dst, int64_t stride) {
  switch (t) {
    case DType::f32:
      if (stride == 4) {
        std::memcpy(dst, in, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * stride, &in[i], 4);
      }
      return;
    case DType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_bf16_bits(in[i]);
        std::memcpy(dst + i * stride, &b, 2);
      }
      return;
    case DType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_f16_bits(in[i]);
        std::memcpy(dst + i * stride, &b, 2);
      }
      return;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = float_to_i32(in[i]);
        std::memcpy(dst + i * stride, &v, 4);
      }
      return;
    case DType::boolean:  // nonzero (NaN too) is true, as the CPU reference converts
      for (int64_t i = 0; i < n; ++i) dst[i * stride] = in[i] != 0.0f ? 1 : 0;
      return;
  }
}

// Calls fn(byte offset of the run from the row start, first element index) for every innermost run.
template <typename Fn>
void for_each_run(const FunctionalExecutor::View& v, Fn&& fn) {
  int64_t index = 0;
  for (int64_t i0 = 0; i0 < v.sizes[0]; ++i0) {
    for (int64_t i1 = 0; i1 < v.sizes[1]; ++i1) {
      for (int64_t i2 = 0; i2 < v.sizes[2]; ++i2) {
        fn(i0 * v.strides[0] + i1 * v.strides[1] + i2 * v.strides[2], index);
        index += v.sizes[3];
      }
    }
  }
}

template <typename Op>
void map_binary(const float* a, const float* b, float* out, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
}

template <typename Op>
void map_scalar(const float* a, float s, float* out, size_t n, bool reverse, Op op) {
  if (reverse) {
    for (size_t i = 0; i < n; ++i) out[i] = op(s, a[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = op(a[i], s);
  }
}

// Dispatches an ALU op to a lambda once, outside the element loop.
template <typename Body>
void with_alu(AluOp op, Body&& body) {
  switch (op) {
    case AluOp::add:
      return body([](float x, float y) { return x + y; });
    case AluOp::subtract:
      return body([](float x, float y) { return x - y; });
    case AluOp::multiply:
      return body([](float x, float y) { return x * y; });
    case AluOp::divide:
      return body([](float x, float y) { return x / y; });
    case AluOp::max:
      return body([](float x, float y) { return std::max(x, y); });
    case AluOp::min:
      return body([](float x, float y) { return std::min(x, y); });
    case AluOp::pow:
      return body([](float x, float y) { return std::pow(x, y); });
    case AluOp::bypass:
      return body([](float x, float) { return x; });
    case AluOp::is_equal:
      return body([](float x, float y) { return x == y ? 1.0f : 0.0f; });
    case AluOp::not_equal:
      return body([](float x, float y) { return x != y ? 1.0f : 0.0f; });
    case AluOp::is_lt:
      return body([](float x, float y) { return x < y ? 1.0f : 0.0f; });
    case AluOp::is_le:
      return body([](float x, float y) { return x <= y ? 1.0f : 0.0f; });
    case AluOp::is_gt:
      return body([](float x, float y) { return x > y ? 1.0f : 0.0f; });
    case AluOp::is_ge:
      return body([](float x, float y) { return x >= y ? 1.0f : 0.0f; });
    case AluOp::keep_if:
      return body([](float x, float y) { return y != 0.0f ? x : 0.0f; });
    case AluOp::keep_unless:
      return body([](float x, float y) { return y != 0.0f ? 0.0f : x; });
  }
}

float reduce_identity(AluOp op) {
  switch (op) {
    case AluOp::max:
      return -std::numeric_limits<float>::infinity();
    case AluOp::min:
      return std::numeric_limits<float>::infinity();
    case AluOp::multiply:
      return 1.0f;
    default:
      return 0.0f;
  }
}

// out[i] = f(in[i] * scale + bias); with `sum`, also *sum = their sum the way an 8-lane accumulator
// adds: lane l takes elements l, l + 8, ...; the tail and then the lanes are added last. Independent
// lanes let the loop vectorize instead of waiting on one serial chain of additions (the rounding differs
// from a serial sum by a few ulps at most), and summing in the same loop overlaps the lanes' chains of
// additions with the computing. `out` may be `in` itself.
template <typename F>
void map_unary(const float* in, float scale, float bias, float* out, size_t n, float* sum, F f) {
  if (sum == nullptr) {
    for (size_t i = 0; i < n; ++i) out[i] = f(in[i] * scale + bias);
    return;
  }
  float lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t l = 0; l < 8; ++l) {
      const float y = f(in[i + l] * scale + bias);
      out[i + l] = y;
      lanes[l] += y;
    }
  }
  float total = 0;
  for (; i < n; ++i) {
    out[i] = f(in[i] * scale + bias);
    total += out[i];
  }
  for (float lane : lanes) total += lane;
  *sum = total;
}

void apply_activation(ActFunc func, const float* in, float scale, float bias, float* out, size_t n, float* sum) {
  switch (func) {
    case ActFunc::identity:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return x; });
    case ActFunc::exp:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::exp(x); });
    case ActFunc::log:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::log(x); });
    case ActFunc::sqrt:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::sqrt(x); });
    case ActFunc::rsqrt:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return 1.0f / std::sqrt(x); });
    case ActFunc::reciprocal:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return 1.0f / x; });
    case ActFunc::tanh:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::tanh(x); });
    case ActFunc::sigmoid:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    case ActFunc::relu:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return x > 0 ? x : 0.0f; });
    case ActFunc::silu:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return x / (1.0f + std::exp(-x)); });
    case ActFunc::gelu_tanh:
      return map_unary(in, scale, bias, out, n, sum, [](float x) {
        const float k = std::sqrt(2.0f / 3.14159265358979f);
        return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
      });
    case ActFunc::square:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return x * x; });
    case ActFunc::abs:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::fabs(x); });
    case ActFunc::neg:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return -x; });
    case ActFunc::erf:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::erf(x); });
    case ActFunc::gelu:  // the exact (erf) form
      return map_unary(in, scale, bias, out, n, sum,
                       [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); });
    case ActFunc::sin:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::sin(x); });
    case ActFunc::cos:
      return map_unary(in, scale, bias, out, n, sum, [](float x) { return std::cos(x); });
  }
}

// n elements of `width` bytes from src (src_stride bytes apart) to dst (dst_stride apart), with a
// copy of a constant size per element so that it compiles to one load and one store.
template <size_t Width>
void copy_elements_of(uint8_t* dst, int64_t dst_stride, const uint8_t* src, int64_t src_stride, int64_t n) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_stride, src + i * src_stride, Width);
}

void copy_elements(uint8_t* dst, int64_t dst_stride, const uint8_t* src, int64_t src_stride, int64_t n,
                   int64_t width) {
  if (width == 4) return copy_elements_of<4>(dst, dst_stride, src, src_stride, n);
  if (width == 2) return copy_elements_of<2>(dst, dst_stride, src, src_stride, n);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * dst_stride, src + i * src_stride, static_cast<size_t>(width));
  }
}

bool ranges_overlap(const uint8_t* a, int64_t a_min, int64_t a_max, const uint8_t* b, int64_t b_min,
                    int64_t b_max) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return static_cast<intptr_t>(x + a_min) < static_cast<intptr_t>(y + b_max) &&
         static_cast<intptr_t>(y + b_min) < static_cast<intptr_t>(x + a_max);
}

// out[i, j] (+)= sum_p stationary[p][i] * moving[p][j] for rows i in [i0, i1) and columns j in [j0, j1),
// p ascending for every element (the same additions in the same order as one p-i-j loop, so the same
// bits), four output rows at a time so that each moving row is loaded once per four rows, in column
// blocks that stay in L1.
void matmul_rows(const float* const* stationary, const float* const* moving, float* const* out, size_t k,
                 size_t i0, size_t i1, size_t j0, size_t j1) {
  constexpr size_t kColumns = 256;
  for (size_t i = i0; i < i1; i += 4) {
    const size_t rows = std::min<size_t>(4, i1 - i);
    for (size_t jb = j0; jb < j1; jb += kColumns) {
      const size_t jn = std::min(kColumns, j1 - jb);
      if (rows == 4) {
        float* __restrict o0 = out[i] + jb;
        float* __restrict o1 = out[i + 1] + jb;
        float* __restrict o2 = out[i + 2] + jb;
        float* __restrict o3 = out[i + 3] + jb;
        for (size_t p = 0; p < k; ++p) {
          const float* __restrict b = moving[p] + jb;
          const float* s = stationary[p] + i;
          const float w0 = s[0], w1 = s[1], w2 = s[2], w3 = s[3];
          for (size_t j = 0; j < jn; ++j) {
            const float x = b[j];
            o0[j] += w0 * x;
            o1[j] += w1 * x;
            o2[j] += w2 * x;
            o3[j] += w3 * x;
          }
        }
        continue;
      }
      for (size_t r = 0; r < rows; ++r) {
        float* __restrict o = out[i + r] + jb;
        for (size_t p = 0; p < k; ++p) {
          const float* __restrict b = moving[p] + jb;
          const float w = stationary[p][i + r];
          for (size_t j = 0; j < jn; ++j) o[j] += w * b[j];
        }
      }
    }
  }
}

#if defined(__x86_64__)
#define SIGHTLINE_AVX2_PATHS 1  // AVX2 and AVX-512 code, chosen at run time by have_avx2 / have_avx512
// What this machine's CPU runs, asked once: every path that picks a vector width reads these.
bool have_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
bool have_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}
// The same additions in the same order as matmul_rows (one multiply, then one add, each rounded: the
// device layer is compiled with -ffp-contract=off, so no target fuses them, and the bits are those of the
// scalar loop), with 4 rows x 2 vectors of Lanes columns of accumulators held in registers for the whole
// k loop instead of loaded and stored once per p. One body for every vector width: it is inlined into a
// function per target (below), which gives the vector type its registers.
template <int Lanes>
struct FloatVector;
template <>
struct FloatVector<8> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct FloatVector<16> {
  typedef float type __attribute__((vector_size(64)));
};

template <int Lanes>
__attribute__((always_inline)) inline void matmul_rows_simd(const float* const* stationary,
                                                            const float* const* moving, float* const* out,
                                                            size_t k, size_t i0, size_t i1, size_t j0,
                                                            size_t j1) {
  using Vec = typename FloatVector<Lanes>::type;
  constexpr size_t kWidth = 2 * Lanes;
  // Operand rows are SBUF partition rows, each in a page of its own: a vector from each of k of them is
  // a line and a TLB entry apiece, in an order the hardware prefetcher does not follow. The stationary
  // columns of these output rows, and each block of kWidth moving columns, are first copied into
  // contiguous panels (bits moved, not computed: the same products and sums). Each moving panel serves
  // every row of [i0, i1), so a caller gives a call as many rows as it can.
  const size_t rows4 = (i1 - i0) / 4 * 4;
  thread_local std::vector<float> st_panel, mv_panel;
  if (st_panel.size() < k * rows4) st_panel.resize(k * rows4);
  if (mv_panel.size() < k * kWidth) mv_panel.resize(k * kWidth);
  // (No panel when fewer than four rows: memcpy's pointers must not be null, even for 0 bytes.)
  for (size_t p = 0; rows4 > 0 && p < k; ++p) {
    std::memcpy(st_panel.data() + p * rows4, stationary[p] + i0, rows4 * sizeof(float));
  }
  size_t j = j0;
  for (; rows4 > 0 && j + kWidth <= j1; j += kWidth) {
    for (size_t p = 0; p < k; ++p) std::memcpy(mv_panel.data() + p * kWidth, moving[p] + j, kWidth * sizeof(float));
    for (size_t i = i0; i < i0 + rows4; i += 4) {
      float* const o[4] = {out[i], out[i + 1], out[i + 2], out[i + 3]};
      Vec c[4][2];
      for (int r = 0; r < 4; ++r) {
        std::memcpy(&c[r][0], o[r] + j, sizeof(Vec));
        std::memcpy(&c[r][1], o[r] + j + Lanes, sizeof(Vec));
      }
      const float* column = st_panel.data() + (i - i0);
      for (size_t p = 0; p < k; ++p) {
        Vec b0, b1;
        std::memcpy(&b0, mv_panel.data() + p * kWidth, sizeof(Vec));
        std::memcpy(&b1, mv_panel.data() + p * kWidth + Lanes, sizeof(Vec));
        const float* s = column + p * rows4;
        for (int r = 0; r < 4; ++r) {
          // A scalar times a vector broadcasts it (one vbroadcastss). Setting a vector's lanes one by one
          // compiled to four 16-byte stores and one 64-byte reload that cannot be forwarded: a stall
          // per row and p that made the k loop four times slower.
          const float w = s[r];
          c[r][0] = c[r][0] + w * b0;
          c[r][1] = c[r][1] + w * b1;
        }
      }
      for (int r = 0; r < 4; ++r) {
        std::memcpy(o[r] + j, &c[r][0], sizeof(Vec));
        std::memcpy(o[r] + j + Lanes, &c[r][1], sizeof(Vec));
      }
    }
  }
  // The columns left (fewer than a block) of the groups of four rows, then the last rows, every column.
  if (rows4 > 0 && j < j1) matmul_rows(stationary, moving, out, k, i0, i0 + rows4, j, j1);
  if (i0 + rows4 < i1) matmul_rows(stationary, moving, out, k, i0 + rows4, i1, j0, j1);
}

__attribute__((target("avx2"))) void matmul_rows_avx2(const float* const* stationary,
                                                       const float* const* moving, float* const* out,
                                                       size_t k, size_t i0, size_t i1, size_t j0, size_t j1) {
  matmul_rows_simd<8>(stationary, moving, out, k, i0, i1, j0, j1);
}

__attribute__((target("avx512f"))) void matmul_rows_avx512(const float* const* stationary,
                                                           const float* const* moving, float* const* out,
                                                           size_t k, size_t i0, size_t i1, size_t j0,
                                                           size_t j1) {
  matmul_rows_simd<16>(stationary, moving, out, k, i0, i1, j0, j1);
}
#endif

#ifdef SIGHTLINE_AVX2_PATHS
// memcpy with non-temporal stores, for a DMA row into HBM from on-chip memory: the destination is not
// read again soon (the next instruction works on SBUF), so writing around the cache saves reading every
// destination line first and leaves the cache to the tiles. The caller fences once per instruction.
__attribute__((target("avx2"))) void copy_streaming(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const size_t head = std::min(bytes, (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32);
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
}
#endif

#ifdef SIGHTLINE_AVX2_PATHS
// dst[p][i] = src[i][p] for 4-byte elements: partitions p in [0, partitions) are adjacent in a source
// row (src + i * src_stride), each destination partition row is contiguous. 8 x 8 blocks are moved
// through registers (eight loads, a register transpose, eight stores; bits are only moved, never
// computed on), in bands of 256 source rows that stay in L2 while every partition takes its part.
__attribute__((target("avx2"))) void transpose_f32_avx2(uint8_t* dst, int64_t dst_stride, const uint8_t* src,
                                                        int64_t src_stride, uint32_t partitions, int64_t n) {
  const uint32_t p_end = partitions / 8 * 8;
  const int64_t i_end = n / 8 * 8;
  for (int64_t band = 0; band < i_end; band += 256) {
    const int64_t band_end = std::min(i_end, band + 256);
    // Source rows are far apart (a row of the tensor each), so the hardware prefetcher does not see
    // them coming: the first pass over a band asks for the next band's rows, every line of their
    // segment, while it works.
    const int64_t segment = int64_t{partitions} * 4;
    for (uint32_t p0 = 0; p0 < p_end; p0 += 8) {
      for (int64_t i0 = band; i0 < band_end; i0 += 8) {
        const uint8_t* s = src + i0 * src_stride + int64_t{p0} * 4;
        if (p0 == 0) {
          for (int64_t i = i0 + 256; i < std::min(n, i0 + 264); ++i) {
            const uint8_t* row = src + i * src_stride;
            for (int64_t b = 0; b < segment; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T1);
          }
        }
        __m256 r[8];
        for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + k * src_stride));
        __m256 t[8], u[8];
        for (int k = 0; k < 8; k += 2) {
          t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
          t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
        }
        for (int k = 0; k < 8; k += 4) {
          u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
          u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
          u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
          u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
        }
        for (int k = 0; k < 4; ++k) {
          r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
          r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
        }
        for (int k = 0; k < 8; ++k) {
          _mm256_storeu_ps(reinterpret_cast<float*>(dst + (int64_t{p0} + k) * dst_stride + i0 * 4), r[k]);
        }
      }
    }
  }
  // The partitions and rows the 8 x 8 blocks left over.
  for (uint32_t p = 0; p < partitions; ++p) {
    const int64_t from = p < p_end ? i_end : 0;
    for (int64_t i = from; i < n; ++i) std::memcpy(dst + p * dst_stride + i * 4, src + i * src_stride + p * 4, 4);
  }
}
#endif

void matmul_rows_fast(const float* const* stationary, const float* const* moving, float* const* out, size_t k,
                      size_t i0, size_t i1, size_t j0, size_t j1) {
#ifdef SIGHTLINE_AVX2_PATHS
  if (have_avx512()) return matmul_rows_avx512(stationary, moving, out, k, i0, i1, j0, j1);
  if (have_avx2()) return matmul_rows_avx2(stationary, moving, out, k, i0, i1, j0, j1);
#endif
  matmul_rows(stationary, moving, out, k, i0, i1, j0, j1);
}

#ifdef SIGHTLINE_AVX2_PATHS
// AVX2 forms of the element-wise loops an RMSNorm-style program spends its arithmetic in. Each computes
// what the scalar loop computes, one rounding per operation in the same order (no FMA: the device layer
// is built with -ffp-contract=off), so the bits are the same; they only make sure 8 lanes go at once
// whatever the baseline target is (the generic loops compile to 4-lane SSE).

// map_unary with the square activation and a sum: the sum's 8 accumulator lanes are one vector, adding
// elements l, l + 8, ... exactly as map_unary's lanes[l] do; the tail and then the lanes are added last.
__attribute__((target("avx2"))) void square_sum_avx2(const float* in, float scale, float bias, float* out,
                                                     size_t n, float* sum) {
  const __m256 vs = _mm256_set1_ps(scale), vb = _mm256_set1_ps(bias);
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(in + i), vs), vb);
    const __m256 y = _mm256_mul_ps(x, x);
    _mm256_storeu_ps(out + i, y);
    acc = _mm256_add_ps(acc, y);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  float total = 0;
  for (; i < n; ++i) {
    const float x = in[i] * scale + bias;
    out[i] = x * x;
    total += out[i];
  }
  for (float lane : lanes) total += lane;
  if (sum != nullptr) *sum = total;
}

// out[i] = a[i] * s (or s * a[i] when reversed, keeping the operand order of map_scalar).
__attribute__((target("avx2"))) void multiply_scalar_avx2(const float* a, float s, float* out, size_t n,
                                                          bool reverse) {
  const __m256 vs = _mm256_set1_ps(s);
  size_t i = 0;
  if (reverse) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(vs, _mm256_loadu_ps(a + i)));
    for (; i < n; ++i) out[i] = s * a[i];
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), vs));
    for (; i < n; ++i) out[i] = a[i] * s;
  }
}

// out[i] = a[i] * b[i].
__attribute__((target("avx2"))) void multiply_avx2(const float* a, const float* b, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = a[i] * b[i];
}
#endif

}  // namespace

FunctionalExecutor::FunctionalExecutor(const Executable& exe, OnChipMemory& sbuf, OnChipMemory& psum,
                                       std::vector<HbmMemory::Span> io)
    : exe_(exe), sbuf_(sbuf), psum_(psum), io_(std::move(io)), ws_(own_) {}

FunctionalExecutor::FunctionalExecutor(const Executable& exe, OnChipMemory& sbuf, OnChipMemory& psum,
                                       std::vector<HbmMemory::Span> io, Workspace& workspace)
    : exe_(exe), sbuf_(sbuf), psum_(psum), io_(std::move(io)), ws_(workspace) {}

FunctionalExecutor::View FunctionalExecutor::view(const AccessPattern& ap, const char* name) const {
  View v;
  v.name = name;
  v.dtype = ap.dtype;
  v.partitions = ap.partition_count;
  v.elements = static_cast<uint32_t>(ap.free_elements());
  v.offset = ap.offset;
  const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
  const int pad = 4 - ap.dim_count;
  for (int d = 0; d < ap.dim_count; ++d) {
    v.sizes[pad + d] = ap.dims[d].size;
    v.strides[pad + d] = int64_t{ap.dims[d].stride} * es;
  }
  if (ap.dim_count == 0) v.strides[3] = es;
  const ByteExtent extent = operand_extent(ap, false);
  v.extent_min = extent.min;
  v.extent_max = extent.max;
  v.contiguous = true;
  int64_t expected = es;
  for (int d = 3; d >= 0; --d) {
    if (v.sizes[d] != 1 && v.strides[d] != expected) v.contiguous = false;
    expected *= v.sizes[d];
  }
  if (ap.memory == Memory::hbm) {
    v.tensor = ap.tensor;
    v.data = io_[ap.tensor].data + ap.offset;
    v.written = io_[ap.tensor].written;
    v.written_base = io_[ap.tensor].offset + ap.offset;
    v.partition_stride = ap.partition_stride * es;
  } else {
    OnChipMemory& chip = ap.memory == Memory::sbuf ? sbuf_ : psum_;
    v.chip = &chip;
    v.first_partition = ap.partition_start;
    v.data = chip.data(ap.partition_start) + ap.offset;
    v.written = &chip.written();
    v.written_base = uint64_t{ap.partition_start} * chip.row_stride() + ap.offset;
    v.partition_stride = static_cast<int64_t>(chip.row_stride());
  }
  v.direct = v.dtype == DType::f32 && v.contiguous && reinterpret_cast<uintptr_t>(v.data) % 4 == 0 &&
             v.partition_stride % 4 == 0;
  return v;
}

void FunctionalExecutor::unwritten(const View& v, uint32_t p, int64_t byte) const {
  if (v.chip == nullptr) {
    fail("operand {} reads HBM tensor '{}' byte {} (partition row {}), which was never written", v.name,
         exe_.io[v.tensor].name, static_cast<int64_t>(v.offset) + p * v.partition_stride + byte, p);
  }
  fail("operand {} reads {} partition {} byte {}, which no instruction of this execution wrote", v.name,
       v.chip == &sbuf_ ? "SBUF" : "PSUM", v.first_partition + p, static_cast<int64_t>(v.offset) + byte);
}

void FunctionalExecutor::check(const View& v, uint32_t p, int64_t byte, int64_t bytes) const {
  const uint64_t begin = static_cast<uint64_t>(static_cast<int64_t>(v.written_base) + p * v.partition_stride + byte);
  const uint64_t end = begin + static_cast<uint64_t>(bytes);
  const uint64_t hole = v.written->first_unwritten(begin, end);
  if (hole != end) unwritten(v, p, byte + static_cast<int64_t>(hole - begin));
}

void FunctionalExecutor::mark(const View& v, uint32_t p, int64_t byte, int64_t bytes) const {
  const uint64_t begin = static_cast<uint64_t>(static_cast<int64_t>(v.written_base) + p * v.partition_stride + byte);
  v.written->mark(begin, begin + static_cast<uint64_t>(bytes));
}

void FunctionalExecutor::check_strided(const View& v, uint32_t p, int64_t byte, int64_t stride, int64_t n) const {
  const uint64_t begin = static_cast<uint64_t>(static_cast<int64_t>(v.written_base) + p * v.partition_stride + byte);
  const uint64_t width = dtype_size(v.dtype);
  const uint64_t i = v.written->first_unwritten_strided(begin, stride, static_cast<uint64_t>(n), width);
  if (i != static_cast<uint64_t>(n)) check(v, p, byte + static_cast<int64_t>(i) * stride, static_cast<int64_t>(width));
}

void FunctionalExecutor::mark_strided(const View& v, uint32_t p, int64_t byte, int64_t stride, int64_t n) const {
  const uint64_t begin = static_cast<uint64_t>(static_cast<int64_t>(v.written_base) + p * v.partition_stride + byte);
  v.written->mark_strided(begin, stride, static_cast<uint64_t>(n), dtype_size(v.dtype));
}

void FunctionalExecutor::load(const View& v, uint32_t p, float* out) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    if (stride == es) {
      check(v, p, off, n * es);
    } else {
      check_strided(v, p, off, stride, n);
    }
    decode_run(v.data + row + off, stride, n, v.dtype, out + index);
  });
}

void FunctionalExecutor::store(const View& v, uint32_t p, const float* in) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    encode_run(in + index, n, v.dtype, v.data + row + off, stride);
    if (stride == es) {
      mark(v, p, off, n * es);
    } else {
      mark_strided(v, p, off, stride, n);
    }
  });
}

const float* FunctionalExecutor::load_f32(const View& v, uint32_t p, float* scratch) const {
  if (!v.direct) {
    load(v, p, scratch);
    return scratch;
  }
  check(v, p, 0, int64_t{v.elements} * 4);
  return reinterpret_cast<const float*>(v.data + p * v.partition_stride);
}

float* FunctionalExecutor::target(const View& v, uint32_t p, float* scratch,
                                  std::initializer_list<const float*> inputs, size_t n) const {
  if (!v.direct) return scratch;
  float* row = reinterpret_cast<float*>(v.data + p * v.partition_stride);
  const auto bytes = static_cast<int64_t>(n * 4);
  for (const float* in : inputs) {
    // An input that is exactly the output row is fine for element-wise work; a partial overlap is not.
    if (in != row && ranges_overlap(reinterpret_cast<const uint8_t*>(in), 0, bytes,
                                    reinterpret_cast<const uint8_t*>(row), 0, bytes)) {
      return scratch;
    }
  }
  return row;
}

void FunctionalExecutor::commit(const View& v, uint32_t p, const float* computed) const {
  if (v.direct && computed == reinterpret_cast<const float*>(v.data + p * v.partition_stride)) {
    mark(v, p, 0, int64_t{v.elements} * 4);
    return;
  }
  store(v, p, computed);
}

void FunctionalExecutor::load_bytes(const View& v, uint32_t p, uint8_t* out) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    const uint8_t* src = v.data + row + off;
    uint8_t* dst = out + index * es;
    if (stride == es) {
      check(v, p, off, n * es);
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      return;
    }
    check_strided(v, p, off, stride, n);
    copy_elements(dst, es, src, stride, n, es);
  });
}

void FunctionalExecutor::store_bytes(const View& v, uint32_t p, const uint8_t* in) const {
  const int64_t es = static_cast<int64_t>(dtype_size(v.dtype));
  const int64_t row = p * v.partition_stride;
  const int64_t n = v.sizes[3], stride = v.strides[3];
  for_each_run(v, [&](int64_t off, int64_t index) {
    uint8_t* dst = v.data + row + off;
    const uint8_t* src = in + index * es;
    if (stride == es) {
      std::memcpy(dst, src, static_cast<size_t>(n * es));
      mark(v, p, off, n * es);
      return;
    }
    copy_elements(dst, stride, src, es, n, es);
    mark_strided(v, p, off, stride, n);
  });
}

void FunctionalExecutor::execute(const Instruction& in) {
  Step step;
  if (make_step(in, step)) {
    reserve_scratch(step);
    for (uint32_t p = 0; p < step.rows; ++p) run_row(step, p);
#ifdef SIGHTLINE_AVX2_PATHS
    if (step.stream) _mm_sfence();  // the streamed rows are visible before the instruction completes
#endif
    return;
  }
  switch (in.opcode) {
    case Opcode::partition_all_reduce:
      return all_reduce(in);
    case Opcode::matmul:
      return matmul_run(in);
    case Opcode::dma_copy:  // make_step leaves only the transposing copies
      transpose_rows(view(in.src0, "src0"), view(in.dst, "dst"));
      return;
    case Opcode::dma_gather:
      return gather(in);
    case Opcode::tensor_scan:
      return scan(in);
    case Opcode::max8:
      return top_values(in);
    case Opcode::find_index8:
      return find_indices(in);
    default:
      fail("internal: opcode {} has no functional model", opcode_name(in.opcode));
  }
}

bool FunctionalExecutor::make_step(const Instruction& in, Step& s) const {
  s = Step{};
  s.in = &in;
  switch (in.opcode) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::tensor_copy:
      s.v[0] = view(in.dst, "dst");
      s.v[1] = view(in.src0, "src0");
      if (in.src1.present()) s.v[2] = view(in.src1, "src1");
      s.rows = s.v[0].partitions;
      return true;
    case Opcode::tensor_reduce:
    case Opcode::bn_stats:
      s.v[0] = view(in.dst, "dst");
      s.v[1] = view(in.src0, "src0");
      s.rows = s.v[1].partitions;
      return true;
    case Opcode::activate:
      s.v[0] = view(in.dst, "dst");
      s.v[1] = view(in.src0, "src0");
      if (in.src1.present()) s.v[2] = view(in.src1, "src1");
      if (in.aux.present()) s.v[3] = view(in.aux, "aux");
      s.rows = s.v[1].partitions;
      return true;
    case Opcode::iota:
      s.v[0] = view(in.dst, "dst");
      s.rows = s.v[0].partitions;
      return true;
    case Opcode::dma_copy: {
      s.v[0] = view(in.dst, "dst");
      s.v[1] = view(in.src0, "src0");
      const View& dst = s.v[0];
      const View& src = s.v[1];
      if (in.dst.dtype == in.src0.dtype && transposes(src, dst)) return false;
      s.rows = src.partitions;
#ifdef SIGHTLINE_AVX2_PATHS
      // On chip to HBM cannot overlap; rows of a few KiB are what streaming stores are for.
      s.stream = have_avx2() && in.dst.dtype == in.src0.dtype && src.contiguous && dst.contiguous &&
                 src.chip != nullptr && dst.chip == nullptr &&
                 int64_t{src.elements} * static_cast<int64_t>(dtype_size(src.dtype)) >= 4096;
#endif
      return true;
    }
    default:
      return false;
  }
}

bool FunctionalExecutor::lane_aligned(Step& s, std::vector<HbmRange>& ranges) const {
  bool on_chip = false;
  for (int i = 0; i < 4; ++i) {
    const View& v = s.v[i];
    if (v.data == nullptr) continue;
    if (v.chip != nullptr) {
      if (on_chip && v.first_partition != s.first) return false;
      on_chip = true;
      s.first = v.first_partition;
      continue;
    }
    // An HBM operand: the host bytes its rows touch, widened to whole written-ness granules (a check
    // or a mark covers the granules it touches, so two operands sharing a granule are not independent).
    const int64_t last = (int64_t{std::max(v.partitions, s.rows)} - 1) * v.partition_stride;
    const auto base = static_cast<int64_t>(reinterpret_cast<intptr_t>(v.data));
    constexpr int64_t kGranule = static_cast<int64_t>(WrittenMap::kGranuleBytes);
    const int64_t begin = base + std::min<int64_t>(0, last) + v.extent_min;
    const int64_t end = base + std::max<int64_t>(0, last) + v.extent_max;
    HbmRange r;
    r.begin = static_cast<uintptr_t>(begin - begin % kGranule);
    r.end = static_cast<uintptr_t>(end + (kGranule - end % kGranule) % kGranule);
    r.write = i == 0 || i == 3;  // dst, and an activation's accumulator
    ranges.push_back(r);
  }
  return on_chip;
}

void FunctionalExecutor::reserve_scratch(const Step& s) {
  size_t n = 0;
  for (const View& v : s.v) n = std::max<size_t>(n, v.elements);
  if (a_.size() < n) a_.resize(n);
  if (b_.size() < n) b_.resize(n);
  if (c_.size() < n) c_.resize(n);
  if (bytes_.size() < n * 4) bytes_.resize(n * 4);
}

void FunctionalExecutor::run_row(const Step& s, uint32_t p) {
  switch (s.in->opcode) {
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::tensor_copy:
      return elementwise_row(s, p);
    case Opcode::tensor_reduce:
      return reduce_row(s, p);
    case Opcode::bn_stats:
      return stats_row(s, p);
    case Opcode::activate:
      return activation_row(s, p);
    case Opcode::iota:
      return iota_row(s, p);
    default:
      return dma_row(s, p);
  }
}

void FunctionalExecutor::run(std::span<const Instruction* const> order, const ErrorHandler& on_error) {
  // A group's lane loop visits every member once per lane; this bounds that and the range checks.
  constexpr size_t kMaxGroup = 1024;
  group_.clear();
  group_reads_.clear();
  group_writes_.clear();
  for (size_t position = 0; position < order.size(); ++position) {
    const Instruction& in = *order[position];
    Step step;
    step_ranges_.clear();
    if (!make_step(in, step) || !lane_aligned(step, step_ranges_)) {
      run_group(on_error);
      try {
        execute(in);
      } catch (const Error& e) {
        on_error(position, e);
      }
      continue;
    }
    step.position = position;
    // A conflict: the step writes bytes the group reads or writes, or reads bytes it writes.
    bool conflict = group_.size() >= kMaxGroup;
    for (const HbmRange& r : step_ranges_) {
      if (conflict) break;
      conflict = group_writes_.overlaps(r.begin, r.end) || (r.write && group_reads_.overlaps(r.begin, r.end));
    }
    if (conflict) run_group(on_error);
    group_.push_back(step);
    for (const HbmRange& r : step_ranges_) (r.write ? group_writes_ : group_reads_).add(r.begin, r.end);
  }
  run_group(on_error);
}

void FunctionalExecutor::run_group(const ErrorHandler& on_error) {
  if (group_.empty()) return;
  uint32_t lo = group_.front().first, hi = 0;
  bool stream = false;
  int64_t widest = 4;  // bytes of the longest operand row
  lanes_.clear();  // each member's lanes, apart from the steps so that the lane loop's scan stays in L1
  for (const Step& s : group_) {
    lo = std::min(lo, s.first);
    hi = std::max(hi, s.first + s.rows);
    stream = stream || s.stream;
    reserve_scratch(s);
    lanes_.push_back({s.first, s.first + s.rows});
    for (const View& v : s.v) widest = std::max(widest, v.extent_max - v.extent_min);
  }
  // Lanes go in blocks: each member runs the block's lanes, then the next member. Any split of the
  // lanes is as good for the results (lanes are independent); blocks of about kBlockBytes of rows per
  // operand keep a block's rows of the few operands in flight inside L2 while a member's HBM rows for
  // the block are one run of adjacent rows (a tile's rows are its partitions), which the hardware
  // prefetcher follows.
  constexpr int64_t kBlockBytes = int64_t{128} << 10;
  const uint32_t block = static_cast<uint32_t>(std::clamp<int64_t>(kBlockBytes / widest, 1, 128));
  for (uint32_t b0 = lo; b0 < hi; b0 += block) {
    const uint32_t b1 = std::min(hi, b0 + block);
    for (size_t k = 0; k < group_.size(); ++k) {
      const uint32_t from = std::max(b0, lanes_[k].first), to = std::min(b1, lanes_[k].second);
      const Step& s = group_[k];
      for (uint32_t c = from; c < to; ++c) {
        try {
          run_row(s, c - s.first);
        } catch (const Error& e) {
          // Member k failed at lane c, after every member ran the lanes below b0, the members before k
          // the block's lanes, and k the block's lanes below c. One after another, a member before k
          // would have run all its rows first: finish them, in order (each sees what it would have seen
          // then: no later member has touched its lanes from b1 on). The first of them that fails is the
          // error of the one-after-another order; if none does, k's is (its lane c read what it would
          // have read then).
          const Error failure = e;
          for (size_t j = 0; j < k; ++j) {
            const Step& before = group_[j];
            for (uint32_t lane = std::max(b1, lanes_[j].first); lane < lanes_[j].second; ++lane) {
              try {
                run_row(before, lane - before.first);
              } catch (const Error& again) {
                group_.clear();
                on_error(before.position, again);
              }
            }
          }
          const size_t position = s.position;
          group_.clear();
          on_error(position, failure);
        }
      }
    }
  }
#ifdef SIGHTLINE_AVX2_PATHS
  if (stream) _mm_sfence();  // the streamed rows are visible before anything reads them
#endif
  group_.clear();
  group_reads_.clear();
  group_writes_.clear();
}

void FunctionalExecutor::elementwise_row(const Step& s, uint32_t p) {
  const Instruction& in = *s.in;
  const View &dst = s.v[0], &a = s.v[1], &b = s.v[2];
  const size_t n = a.elements;
  const float* av = load_f32(a, p, a_.data());
  if (in.opcode == Opcode::tensor_copy) {
    if (!dst.direct) {
      store(dst, p, av);
      return;
    }
    float* out = target(dst, p, c_.data(), {av}, n);
    if (out != av) std::memcpy(out, av, n * 4);
    commit(dst, p, out);
    return;
  }
  if (in.opcode == Opcode::tensor_tensor) {
    const float* bv = load_f32(b, p, b_.data());
    float* out = target(dst, p, c_.data(), {av, bv}, n);
#ifdef SIGHTLINE_AVX2_PATHS
    if (in.alu() == AluOp::multiply && have_avx2()) {
      multiply_avx2(av, bv, out, n);
      commit(dst, p, out);
      return;
    }
#endif
    with_alu(in.alu(), [&](auto op) { map_binary(av, bv, out, n, op); });
    commit(dst, p, out);
  } else {
    float scalar = in.imm0;
    if (in.src1.present()) load(b, p, &scalar);
    const bool reverse = (in.flags & kFlagReverse) != 0;
    float* out = target(dst, p, c_.data(), {av}, n);
#ifdef SIGHTLINE_AVX2_PATHS
    if (in.alu() == AluOp::multiply && have_avx2()) {
      multiply_scalar_avx2(av, scalar, out, n, reverse);
      commit(dst, p, out);
      return;
    }
#endif
    with_alu(in.alu(), [&](auto op) { map_scalar(av, scalar, out, n, reverse, op); });
    commit(dst, p, out);
  }
}

void FunctionalExecutor::reduce_row(const Step& s, uint32_t p) {
  const View &dst = s.v[0], &a = s.v[1];
  const size_t n = a.elements;
  const float* av = load_f32(a, p, a_.data());
  // dst[p, j] reduces the j-th run of n / outputs elements: the innermost dims (validate.cpp).
  const size_t outputs = dst.elements, run = n / outputs;
  const bool negate = (s.in->flags & kFlagNegate) != 0;
  float* out = c_.data();
  with_alu(s.in->alu(), [&](auto op) {
    for (size_t j = 0; j < outputs; ++j) {
      float acc = reduce_identity(s.in->alu());
      for (size_t i = j * run; i < (j + 1) * run; ++i) acc = op(acc, av[i]);
      out[j] = negate ? -acc : acc;
    }
  });
  store(dst, p, out);
}

void FunctionalExecutor::stats_row(const Step& s, uint32_t p) {
  const View &dst = s.v[0], &a = s.v[1];
  const size_t n = a.elements;
  const float* av = load_f32(a, p, a_.data());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += av[i];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (size_t i = 0; i < n; ++i) squares += (av[i] - mean) * (av[i] - mean);
  const float out[2] = {static_cast<float>(mean), static_cast<float>(squares / static_cast<double>(n))};
  store(dst, p, out);
}

void FunctionalExecutor::activation_row(const Step& s, uint32_t p) {
  const Instruction& in = *s.in;
  const View &dst = s.v[0], &a = s.v[1], &column = s.v[2], &acc = s.v[3];
  const size_t n = a.elements;
  const float* av = load_f32(a, p, a_.data());
  float factor = in.imm0, bias = in.imm1;
  if (in.src1.present()) load(column, p, (in.flags & kFlagBiasOperand) ? &bias : &factor);
  float* out = target(dst, p, c_.data(), {av}, n);
  float sum = 0;
#ifdef SIGHTLINE_AVX2_PATHS
  if (in.act() == ActFunc::square && in.aux.present() && have_avx2()) {
    square_sum_avx2(av, factor, bias, out, n, &sum);
    commit(dst, p, out);
    store(acc, p, &sum);
    return;
  }
#endif
  apply_activation(in.act(), av, factor, bias, out, n, in.aux.present() ? &sum : nullptr);
  commit(dst, p, out);
  if (in.aux.present()) store(acc, p, &sum);
}

void FunctionalExecutor::iota_row(const Step& s, uint32_t p) {
  const View& dst = s.v[0];
  const size_t n = dst.elements;
  const float start = s.in->imm0 + s.in->imm1 * static_cast<float>(p);
  float* out = target(dst, p, c_.data(), {}, n);
  for (size_t i = 0; i < n; ++i) out[i] = start + static_cast<float>(i);
  commit(dst, p, out);
}

void FunctionalExecutor::all_reduce(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const size_t n = a.elements;
  a_.resize(n);
  c_.assign(n, reduce_identity(in.alu()));
  for (uint32_t p = 0; p < a.partitions; ++p) {
    const float* av = load_f32(a, p, a_.data());
    with_alu(in.alu(), [&](auto op) { map_binary(c_.data(), av, c_.data(), n, op); });
  }
  for (uint32_t p = 0; p < dst.partitions; ++p) store(dst, p, c_.data());
}

void FunctionalExecutor::matmul_run(const Instruction& in) {
  const View dst = view(in.dst, "dst"), st = view(in.src0, "stationary"), mv = view(in.src1, "moving");
  const size_t k = st.partitions, m = st.elements, n = mv.elements;
  a_.resize(k * m);
  b_.resize(k * n);
  c_.resize(m * n);
  st_rows_.resize(k);
  mv_rows_.resize(k);
  out_rows_.resize(m);
  // Every read is checked before anything is written.
  for (uint32_t p = 0; p < k; ++p) {
    st_rows_[p] = load_f32(st, p, a_.data() + p * m);
    mv_rows_[p] = load_f32(mv, p, b_.data() + p * n);
  }
  const bool accumulate = (in.flags & kFlagAccumulate) != 0;
  for (uint32_t row = 0; row < m; ++row) {
    float* scratch = c_.data() + row * n;
    if (accumulate) load_f32(dst, row, scratch);  // fills scratch unless the row is computed in place
    float* out = target(dst, row, scratch, {}, n);
    if (!accumulate) std::fill_n(out, n, 0.0f);
    out_rows_[row] = out;
  }
  // Output elements are independent: split them over the CPU backend's thread pool in tiles of up to
  // kTileRows rows x kTileColumns columns. A tile copies its moving columns once for all its rows, so
  // tiles take every row of a narrow stationary operand (m = 32 tokens: each moving element is used 32
  // times) and are split by columns instead; copying the same moving rows once per group of four rows
  // made the copy cost more than the arithmetic.
  constexpr size_t kTileRows = 64, kTileColumns = 128;
  const size_t row_tiles = std::max<size_t>(1, (m + kTileRows - 1) / kTileRows);
  const size_t column_tiles = std::max<size_t>(1, (n + kTileColumns - 1) / kTileColumns);
  const size_t tile_rows = (m + row_tiles - 1) / row_tiles, tile_columns = (n + column_tiles - 1) / column_tiles;
  const size_t rows_step = std::max<size_t>(4, (tile_rows + 3) / 4 * 4);
  const size_t columns_step = std::max<size_t>(32, (tile_columns + 31) / 32 * 32);
  const auto tiles_of = [](size_t extent, size_t step) { return (extent + step - 1) / step; };
  const int64_t row_count = static_cast<int64_t>(tiles_of(m, rows_step));
  const int64_t tiles = row_count * static_cast<int64_t>(tiles_of(n, columns_step));
  // Below about 64k multiply-adds a tile, handing it to another thread costs more than it saves.
  const int64_t grain = std::max<int64_t>(
      1, int64_t{1 << 16} / static_cast<int64_t>(std::max<size_t>(k * rows_step * columns_step, 1)));
  if (m > 0 && n > 0) parallel_for(0, tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const size_t i0 = static_cast<size_t>(t % row_count) * rows_step;
      const size_t j0 = static_cast<size_t>(t / row_count) * columns_step;
      matmul_rows_fast(st_rows_.data(), mv_rows_.data(), out_rows_.data(), k, i0, std::min(m, i0 + rows_step),
                       j0, std::min(n, j0 + columns_step));
    }
  });
  for (uint32_t row = 0; row < m; ++row) commit(dst, row, out_rows_[row]);
}

void FunctionalExecutor::dma_row(const Step& s, uint32_t p) {
  const View &dst = s.v[0], &src = s.v[1];
  if (s.in->dst.dtype != s.in->src0.dtype) {
    const float* av = load_f32(src, p, a_.data());
    if (av != a_.data() && ranges_overlap(src.data + p * src.partition_stride, src.extent_min, src.extent_max,
                                          dst.data + p * dst.partition_stride, dst.extent_min, dst.extent_max)) {
      std::memcpy(a_.data(), av, size_t{src.elements} * 4);
      av = a_.data();
    }
    store(dst, p, av);
    return;
  }
  const int64_t row_bytes = int64_t{src.elements} * static_cast<int64_t>(dtype_size(src.dtype));
  uint8_t* from = src.data + p * src.partition_stride;
  uint8_t* to = dst.data + p * dst.partition_stride;
  if (src.contiguous && dst.contiguous) {  // one memcpy per descriptor row
    check(src, p, 0, row_bytes);
#ifdef SIGHTLINE_AVX2_PATHS
    if (s.stream) {
      copy_streaming(to, from, static_cast<size_t>(row_bytes));
    } else {
      std::memmove(to, from, static_cast<size_t>(row_bytes));
    }
#else
    std::memmove(to, from, static_cast<size_t>(row_bytes));
#endif
    mark(dst, p, 0, row_bytes);
    return;
  }
  const bool overlap = ranges_overlap(from, src.extent_min, src.extent_max, to, dst.extent_min, dst.extent_max);
  if (!overlap && src.contiguous) {
    check(src, p, 0, row_bytes);
    store_bytes(dst, p, from);
  } else if (!overlap && dst.contiguous) {
    load_bytes(src, p, to);
    mark(dst, p, 0, row_bytes);
  } else {
    load_bytes(src, p, bytes_.data());
    store_bytes(dst, p, bytes_.data());
  }
}

bool FunctionalExecutor::transposes(const View& src, const View& dst) const {
  // A same-dtype copy whose source row is strided runs (a column of a row-major tensor, say, or a few
  // columns' worth of them) into destination rows that are contiguous, or on chip and made of contiguous
  // runs of the same length (run k of the source lands in run k of the destination; on-chip partitions
  // never share bytes, so the order partitions are written in changes nothing). Row by row, every
  // element would be its own cache line; a block of partitions at a time, the elements of neighbouring
  // partitions share lines.
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  const int64_t n = src.sizes[3], stride = src.strides[3];
  const bool runs_match = dst.chip != nullptr && dst.sizes[3] == n && dst.strides[3] == es;
  if (!(dst.contiguous || runs_match) || stride == es || n < 2 || src.partitions < 2 || (es != 2 && es != 4)) {
    return false;
  }
  for (uint32_t p = 0; p < src.partitions; ++p) {
    if (ranges_overlap(src.data + p * src.partition_stride, src.extent_min, src.extent_max, dst.data,
                       std::min<int64_t>(0, dst.extent_min),
                       (int64_t{dst.partitions} - 1) * dst.partition_stride +
                           std::max<int64_t>(dst.extent_max, int64_t{dst.elements} * es))) {
      return false;
    }
  }
  return true;
}

void FunctionalExecutor::transpose_rows(const View& src, const View& dst) {
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype));
  const int64_t n = src.sizes[3], stride = src.strides[3];
  // Every read is checked before any write. When the partitions' elements of a source row are adjacent
  // (a column block of a row-major tensor), row i of each run's block is one range: n range checks per
  // run instead of one bit per element. Only if one finds a hole does the row-by-row check run, in the
  // order a row-by-row copy reads (partition, then run), to name the hole that copy would name.
  bool written = src.partition_stride == es;
  for_each_run(src, [&](int64_t off, int64_t) {
    if (!written) return;
    const uint64_t begin = static_cast<uint64_t>(static_cast<int64_t>(src.written_base) + off);
    const uint64_t bytes = uint64_t{src.partitions} * static_cast<uint64_t>(es);
    written = src.written->first_unwritten_rows(begin, stride, static_cast<uint64_t>(n), bytes) ==
              static_cast<uint64_t>(n);
  });
  if (!written) {
    for (uint32_t p = 0; p < src.partitions; ++p) {
      for_each_run(src, [&](int64_t off, int64_t) { check_strided(src, p, off, stride, n); });
    }
  }
  // Run by run: the run at `off` of every partition row goes to the destination rows' run of the same
  // elements (from element `index` of a contiguous row, else the destination's run of that number).
  dst_runs_.clear();
  if (!dst.contiguous) for_each_run(dst, [&](int64_t off, int64_t) { dst_runs_.push_back(off); });
  for_each_run(src, [&](int64_t off, int64_t index) {
    const uint8_t* from = src.data + off;
    uint8_t* to = dst.data + (dst.contiguous ? index * es : dst_runs_[static_cast<size_t>(index / n)]);
#ifdef SIGHTLINE_AVX2_PATHS
    if (have_avx2() && es == 4 && src.partition_stride == 4) {
      // A large block in row slices over the pool: the source rows are far apart, so each is a cache
      // (and page) miss, and two cores keep twice as many misses in flight (cold 64-byte reads of 512
      // rows 5 KiB apart, the compiled linears' weight loads: 3.4 GB/s on one core, 5.5 on two).
      const int64_t slice = (n / thread_count() + 7) / 8 * 8;
      if (int64_t{src.partitions} * n * 4 < (int64_t{16} << 10) || slice < 64) {
        transpose_f32_avx2(to, dst.partition_stride, from, stride, src.partitions, n);
        return;
      }
      parallel_for(0, (n + slice - 1) / slice, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t i0 = t * slice, i1 = std::min(n, i0 + slice);
          transpose_f32_avx2(to + i0 * 4, dst.partition_stride, from + i0 * stride, stride, src.partitions, i1 - i0);
        }
      });
      return;
    }
#endif
    constexpr uint32_t kBlock = 16;
    for (uint32_t p0 = 0; p0 < src.partitions; p0 += kBlock) {
      const uint32_t p1 = std::min(src.partitions, p0 + kBlock);
      for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t i1 = std::min(n, i0 + 256);
        for (uint32_t p = p0; p < p1; ++p) {
          copy_elements(to + p * dst.partition_stride + i0 * es, es, from + p * src.partition_stride + i0 * stride,
                        stride, i1 - i0, es);
        }
      }
    }
  });
  for (uint32_t p = 0; p < dst.partitions; ++p) {
    if (dst.contiguous) {
      mark(dst, p, 0, int64_t{src.elements} * es);
    } else {
      for (const int64_t off : dst_runs_) mark(dst, p, off, n * es);
    }
  }
}

void FunctionalExecutor::gather(const Instruction& in) {
  const View dst = view(in.dst, "dst"), table = view(in.src0, "src0"), ids = view(in.src1, "src1");
  const bool same_dtype = in.dst.dtype == in.src0.dtype;
  const int64_t row_bytes = int64_t{table.elements} * static_cast<int64_t>(dtype_size(table.dtype));
  bytes_.resize(static_cast<size_t>(row_bytes));
  a_.resize(table.elements);
  for (uint32_t p = 0; p < dst.partitions; ++p) {
    float id = 0;
    load(ids, p, &id);
    if (!(id >= 0 && id < static_cast<float>(table.partitions))) {
      fail("operand src1 row {} holds index {}, outside the table's rows 0..{}", p, id, table.partitions - 1);
    }
    const uint32_t row = static_cast<uint32_t>(id);
    if (same_dtype && table.contiguous && dst.contiguous) {  // the table is HBM, dst on chip: no overlap
      check(table, row, 0, row_bytes);
      std::memcpy(dst.data + p * dst.partition_stride, table.data + row * table.partition_stride,
                  static_cast<size_t>(row_bytes));
      mark(dst, p, 0, row_bytes);
    } else if (same_dtype) {
      load_bytes(table, row, bytes_.data());
      store_bytes(dst, p, bytes_.data());
    } else {
      load(table, row, a_.data());
      store(dst, p, a_.data());
    }
  }
}

}  // namespace sightline::device

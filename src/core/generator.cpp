#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <numbers>

#include "core/parallel.h"

#include "sightline/tensor.h"

namespace sightline {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// One step of xoshiro256** on state words passed one by one, so that a loop can keep them in registers.
inline uint64_t xoshiro_step(uint64_t& s0, uint64_t& s1, uint64_t& s2, uint64_t& s3) {
  const uint64_t result = rotl(s1 * 5, 7) * 9;
  const uint64_t t = s1 << 17;
  s2 ^= s0;
  s3 ^= s1;
  s1 ^= s2;
  s0 ^= s3;
  s2 ^= t;
  s3 = rotl(s3, 45);
  return result;
}

// A uniform in [0, 1) from 53 bits of a draw.
inline double uniform_of(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

Generator::Generator(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t Generator::next_u64() { return xoshiro_step(s_[0], s_[1], s_[2], s_[3]); }

double Generator::next_uniform() { return uniform_of(next_u64()); }

namespace {

// The Box-Muller pair of next_normal(), with libm: the definition of the sequence.
void exact_pair(double u1, double u2, double& first, double& second) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * std::numbers::pi * u2;
  second = r * std::sin(theta);
  first = r * std::cos(theta);
}

// cos and sin of theta in [0, 2 pi) with an absolute error below 2^-50: theta less the nearest
// multiple k of pi/2 in three parts (fdlibm's __rem_pio2 constants: k * the first part is exact for
// k <= 4), then fdlibm's kernel polynomials on [-pi/4, pi/4] and the quadrant k mod 4. Branch-free, so
// that a block of them vectorizes; used only where the float rounding of the result is certain.
void fast_sincos(double theta, double& c, double& s) {
  constexpr double kInvPio2 = 6.36619772367581382433e-01;
  constexpr double kPio2_1 = 1.57079632673412561417e+00;
  constexpr double kPio2_1t = 6.07710050650619224932e-11;
  constexpr double kShift = 0x1.8p52;
  const double shifted = theta * kInvPio2 + kShift;
  const double fn = shifted - kShift;
  const auto q = static_cast<uint32_t>(std::bit_cast<uint64_t>(shifted)) & 3u;
  const double y = (theta - fn * kPio2_1) - fn * kPio2_1t;
  const double z = y * y;
  const double sin_y =
      y + y * z *
              (-1.66666666666666324348e-01 +
               z * (8.33333333332248946124e-03 +
                    z * (-1.98412698298579493134e-04 +
                         z * (2.75573137070700676789e-06 + z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)))));
  const double cos_y =
      1.0 - 0.5 * z +
      z * z *
          (4.16666666666666019037e-02 +
           z * (-1.38888888888741095749e-03 +
                z * (2.48015872894767294178e-05 +
                     z * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
  const bool swap = (q & 1u) != 0;
  const double c0 = swap ? sin_y : cos_y, s0 = swap ? cos_y : sin_y;
  c = (q == 1u || q == 2u) ? -c0 : c0;
  s = (q >= 2u) ? -s0 : s0;
}

// Whether every double within `e` of v rounds to the same float as v: then a value within `e` of v
// (libm's, when v is a fast approximation of it) has the same float.
bool rounds_surely(double v, double e) {
  return static_cast<float>(v - e) == static_cast<float>(v + e);
}

}  // namespace

// Box-Muller with libm's log and sqrt; the sine and cosine come from fast_sincos, whose error (below
// 2^-50, libm's below 2^-52) is far inside the margin of 2^-40 of r and of the value allowed here. A pair
// whose float rounding that margin leaves in doubt (about one in 10^4) is computed by exact_pair, so
// every static_cast<float>(next_normal()) -- all a tensor takes of it -- is that of exact_pair, the
// sequence this generator has always drawn; the doubles themselves may differ from it in the last bits.
double Generator::next_normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_normal_;
  }
  double u1 = next_uniform();
  while (u1 <= 0.0) u1 = next_uniform();
  const double u2 = next_uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  double c = 0, s = 0;
  fast_sincos(2.0 * std::numbers::pi * u2, c, s);
  double first = r * c, second = r * s;
  const double margin = r * 0x1p-40;
  if (!rounds_surely(first, margin + std::fabs(first) * 0x1p-40) ||
      !rounds_surely(second, margin + std::fabs(second) * 0x1p-40)) {
    exact_pair(u1, u2, first, second);
  }
  spare_normal_ = second;
  has_spare_ = true;
  return first;
}

namespace {

// A block of Box-Muller pairs, N lanes at a time (n a multiple of 8): first[p], second[p] are the floats
// of r cos(theta), r sin(theta) for r = sqrt(-2 log u1[p]), theta = 2 pi u2[p], and doubt[p] is nonzero
// where next_normal's margin test would fall back to libm (the caller then calls exact_pair). The log is
// musl's / fdlibm's e_log (the argument reduced to [sqrt(2)/2, sqrt(2)) by its exponent bits, then the
// Lg1-Lg7 polynomial in s = f / (2 + f): error below 1 ulp, as libm's), branch-free for positive normal
// arguments, which every u1 (a multiple of 2^-53 in (0, 1)) is; the sine and cosine are fast_sincos's,
// the quadrant's swap and signs done on the bits. One body for every target: inlined into a default and
// an AVX2 + FMA function (4 lanes) and an AVX-512 one (8 lanes), chosen at run time. A fused
// multiply-add moves these doubles by far less than the 2^-40 margin, so every target gives the same
// floats: those of exact_pair.
template <int N>
struct Lanes {
  typedef double D __attribute__((vector_size(8 * N)));
  typedef uint64_t B __attribute__((vector_size(8 * N)));
  typedef float F __attribute__((vector_size(4 * N)));
  typedef int32_t M __attribute__((vector_size(4 * N)));
};

template <int N>
[[gnu::always_inline]] inline void normal_pairs_body(const double* u1, const double* u2, float* first,
                                                     float* second, int32_t* doubt, size_t n) {
  using Double = typename Lanes<N>::D;
  using Bits = typename Lanes<N>::B;
  using Float = typename Lanes<N>::F;
  using Mask = typename Lanes<N>::M;
  for (size_t p = 0; p < n; p += N) {
    Double x, t;
    __builtin_memcpy(&x, u1 + p, sizeof x);
    __builtin_memcpy(&t, u2 + p, sizeof t);
    // log(x) = k ln 2 + log(m), m = x 2^-k in [sqrt(2)/2, sqrt(2)).
    Bits bits = __builtin_bit_cast(Bits, x) + ((0x3ff00000ull - 0x3fe6a09eull) << 32);
    const Bits kbits = (bits >> 52) | 0x4330000000000000ull;  // 2^52 + k + 1023
    const Double dk = __builtin_bit_cast(Double, kbits) - (0x1p52 + 1023.0);
    bits = (bits & 0x000fffffffffffffull) + (0x3fe6a09eull << 32);
    const Double f = __builtin_bit_cast(Double, bits) - 1.0;
    const Double hfsq = 0.5 * f * f;
    const Double sr = f / (2.0 + f);
    const Double z = sr * sr, w = z * z;
    const Double t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    const Double t2 =
        z * (6.666666666666735130e-01 +
             w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    const Double log_x = sr * (hfsq + (t1 + t2)) + dk * 1.90821492927058770002e-10 - hfsq + f +
                         dk * 6.93147180369123816490e-01;
    Double r;  // sqrt(-2 log x), lane by lane (the argument is positive: no errno path is taken)
    for (int l = 0; l < N; ++l) r[l] = __builtin_sqrt(-2.0 * log_x[l]);

    // fast_sincos, lane by lane the same operations.
    const Double theta = (2.0 * std::numbers::pi) * t;
    const Double shifted = theta * 6.36619772367581382433e-01 + 0x1.8p52;
    const Double fn = shifted - 0x1.8p52;
    const Bits q = __builtin_bit_cast(Bits, shifted) & 3u;
    const Double y = (theta - fn * 1.57079632673412561417e+00) - fn * 6.07710050650619224932e-11;
    const Double yy = y * y;
    const Double sin_y =
        y + y * yy *
                (-1.66666666666666324348e-01 +
                 yy * (8.33333333332248946124e-03 +
                       yy * (-1.98412698298579493134e-04 +
                             yy * (2.75573137070700676789e-06 +
                                   yy * (-2.50507602534068634195e-08 + yy * 1.58969099521155010221e-10)))));
    const Double cos_y =
        1.0 - 0.5 * yy +
        yy * yy *
            (4.16666666666666019037e-02 +
             yy * (-1.38888888888741095749e-03 +
                   yy * (2.48015872894767294178e-05 +
                         yy * (-2.75573143513906633035e-07 +
                               yy * (2.08757232129817482790e-09 + yy * -1.13596475577881948265e-11)))));
    const Bits swap = -(q & 1u);  // all ones in odd quadrants
    const Bits sin_bits = __builtin_bit_cast(Bits, sin_y), cos_bits = __builtin_bit_cast(Bits, cos_y);
    const Bits c_bits = ((sin_bits & swap) | (cos_bits & ~swap)) ^ (((q + 1u) & 2u) << 62);  // - in 1, 2
    const Bits s_bits = ((cos_bits & swap) | (sin_bits & ~swap)) ^ ((q & 2u) << 62);         // - in 2, 3
    const Double v1 = r * __builtin_bit_cast(Double, c_bits), v2 = r * __builtin_bit_cast(Double, s_bits);
    // rounds_surely of both values, with next_normal's margins.
    const Double margin = r * 0x1p-40;
    const Double e1 = margin + __builtin_bit_cast(Double, __builtin_bit_cast(Bits, v1) & 0x7fffffffffffffffull) * 0x1p-40;
    const Double e2 = margin + __builtin_bit_cast(Double, __builtin_bit_cast(Bits, v2) & 0x7fffffffffffffffull) * 0x1p-40;
    const Float f1 = __builtin_convertvector(v1, Float), f2 = __builtin_convertvector(v2, Float);
    const Mask unsure = (__builtin_convertvector(v1 - e1, Float) != __builtin_convertvector(v1 + e1, Float)) |
                        (__builtin_convertvector(v2 - e2, Float) != __builtin_convertvector(v2 + e2, Float));
    __builtin_memcpy(first + p, &f1, sizeof f1);
    __builtin_memcpy(second + p, &f2, sizeof f2);
    __builtin_memcpy(doubt + p, &unsure, sizeof unsure);
  }
}

void normal_pairs_default(const double* u1, const double* u2, float* first, float* second, int32_t* doubt,
                          size_t n) {
  normal_pairs_body<4>(u1, u2, first, second, doubt, n);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void normal_pairs_avx2(const double* u1, const double* u2, float* first,
                                                            float* second, int32_t* doubt, size_t n) {
  normal_pairs_body<4>(u1, u2, first, second, doubt, n);
}
__attribute__((target("avx512f,avx512dq,avx512vl,fma"))) void normal_pairs_avx512(const double* u1, const double* u2,
                                                                                  float* first, float* second,
                                                                                  int32_t* doubt, size_t n) {
  normal_pairs_body<8>(u1, u2, first, second, doubt, n);
}
#endif

void normal_pairs(const double* u1, const double* u2, float* first, float* second, int32_t* doubt, size_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512vl");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512) return normal_pairs_avx512(u1, u2, first, second, doubt, n);
  if (avx2) return normal_pairs_avx2(u1, u2, first, second, doubt, n);
#endif
  normal_pairs_default(u1, u2, first, second, doubt, n);
}

// xoshiro256** is linear over GF(2): the state k steps on is a 256 x 256 bit matrix times the state.
using Words = std::array<uint64_t, 4>;
struct BitMatrix {
  std::array<Words, 256> column;  // the image of state bit i (word i / 64, bit i % 64)
};

Words times(const BitMatrix& m, const Words& state) {
  Words out{};
  for (int i = 0; i < 256; ++i) {
    if ((state[static_cast<size_t>(i / 64)] >> (i % 64)) & 1u) {
      for (size_t w = 0; w < 4; ++w) out[w] ^= m.column[static_cast<size_t>(i)][w];
    }
  }
  return out;
}

// The matrix of 2^log2_steps steps, by squaring the matrix of one.
BitMatrix jump_matrix(int log2_steps) {
  auto m = std::make_unique<BitMatrix>();
  for (size_t i = 0; i < 256; ++i) {
    Words e{};
    e[i / 64] = uint64_t{1} << (i % 64);
    (void)xoshiro_step(e[0], e[1], e[2], e[3]);
    m->column[i] = e;
  }
  for (int k = 0; k < log2_steps; ++k) {
    auto squared = std::make_unique<BitMatrix>();
    for (size_t i = 0; i < 256; ++i) squared->column[i] = times(*m, m->column[i]);
    m = std::move(squared);
  }
  return *m;
}

constexpr size_t kBlock = 512;       // pairs per normal_pairs call
constexpr int kLog2Chunk = 16;       // pairs per chunk: 2^16
constexpr size_t kChunk = size_t{1} << kLog2Chunk;
constexpr size_t kRoundChunks = 16;  // chunks drawn at once over the thread pool

// The state a chunk of kChunk pairs leaves when none of its u1 is rejected: 2 * kChunk steps.
const BitMatrix& chunk_jump() {
  static const BitMatrix m = jump_matrix(kLog2Chunk + 1);
  return m;
}

// `pairs` pairs of next_normal() from `state`, written interleaved to `out`, a block at a time: the
// uniforms drawn in sequence order (the rejection of u1 = 0 included), normal_pairs, and exact_pair
// where the float rounding is in doubt (the 2^-40 margin also covers this log's error of an ulp or two
// against libm's); each float times `scale`. Returns whether exactly 2 * pairs uniforms were drawn (no
// u1 was rejected); `state` ends where the draws leave it.
bool normal_chunk(Words& state, float* out, size_t pairs, float scale) {
  alignas(64) double u1[kBlock], u2[kBlock];
  alignas(64) float first[kBlock], second[kBlock];
  alignas(64) int32_t doubt[kBlock];
  uint64_t s0 = state[0], s1 = state[1], s2 = state[2], s3 = state[3];  // in registers
  const auto uniform = [&] { return uniform_of(xoshiro_step(s0, s1, s2, s3)); };
  bool exact = true;
  for (size_t p0 = 0; p0 < pairs; p0 += kBlock) {
    const size_t count = std::min(kBlock, pairs - p0);
    for (size_t p = 0; p < count; ++p) {
      double a = uniform();
      while (a <= 0.0) {
        exact = false;
        a = uniform();
      }
      u1[p] = a;
      u2[p] = uniform();
    }
    const size_t padded = (count + 7) & ~size_t{7};
    for (size_t p = count; p < padded; ++p) u1[p] = u2[p] = 0.5;
    normal_pairs(u1, u2, first, second, doubt, padded);
    for (size_t p = 0; p < count; ++p) {
      if (doubt[p] != 0) {
        double x = 0, y = 0;
        exact_pair(u1[p], u2[p], x, y);
        first[p] = static_cast<float>(x);
        second[p] = static_cast<float>(y);
      }
      out[2 * (p0 + p)] = first[p] * scale;
      out[2 * (p0 + p) + 1] = second[p] * scale;
    }
  }
  state = {s0, s1, s2, s3};
  return exact;
}

}  // namespace

// The pairs of next_normal() in chunks of 2^16, up to 16 chunks at once over the thread pool. Each
// uniform follows from the last state, so a chunk's first state is found by jumping: a chunk draws
// 2^17 uniforms unless it rejects a u1 = 0 (a chance of 2^-53 per draw), and 2^17 xoshiro256** steps
// are one bit matrix (chunk_jump). A chunk that did reject is still right (it began where the chunks
// before it ended), but those after it began at a predicted state that was not theirs: they are drawn
// again from where it ended. A spare left by next_normal comes first; an odd last value is
// next_normal's, which leaves its pair's second value as the spare, as n calls would. Every value is
// the same on any number of threads (seeded weights of a 650M-parameter model: 650M values).
void Generator::fill_normal(float* out, size_t n, float scale) {
  size_t i = 0;
  if (n > 0 && has_spare_) {
    has_spare_ = false;
    out[i++] = static_cast<float>(spare_normal_) * scale;
  }
  const size_t all_pairs = (n - i) / 2;
  float* dst = out + i;
  Words state = s_;
  size_t done = 0;
  while (done < all_pairs) {
    const size_t chunks = std::min(kRoundChunks, (all_pairs - done + kChunk - 1) / kChunk);
    std::array<Words, kRoundChunks> start{}, end{};
    std::array<bool, kRoundChunks> exact{};
    start[0] = state;
    for (size_t c = 1; c < chunks; ++c) start[c] = times(chunk_jump(), start[c - 1]);
    parallel_for(0, static_cast<int64_t>(chunks), 1, [&](int64_t c0, int64_t c1) {
      for (auto c = static_cast<size_t>(c0); c < static_cast<size_t>(c1); ++c) {
        const size_t p0 = done + c * kChunk;
        end[c] = start[c];
        exact[c] = normal_chunk(end[c], dst + 2 * p0, std::min(kChunk, all_pairs - p0), scale);
      }
    });
    size_t good = chunks;  // chunks whose first state was theirs
    for (size_t c = 0; c + 1 < chunks; ++c) {
      if (!exact[c]) {
        good = c + 1;
        break;
      }
    }
    done = std::min(all_pairs, done + good * kChunk);
    state = end[good - 1];
  }
  s_ = state;
  i += 2 * all_pairs;
  if (i < n) out[i] = static_cast<float>(next_normal()) * scale;
}

Generator::State Generator::get_state() const { return {s_, spare_normal_, has_spare_}; }

void Generator::set_state(const State& state) {
  SIGHTLINE_CHECK(state.words != Words{},
                  "Generator::set_state: the state words are all zero, the one state xoshiro256** never leaves; "
                  "take a state from get_state()");
  s_ = state.words;
  spare_normal_ = state.spare_normal;
  has_spare_ = state.has_spare;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace sightline

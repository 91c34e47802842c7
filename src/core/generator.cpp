#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <vector>

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

// A block of Box-Muller pairs, 4 lanes at a time (n a multiple of 4): first[p], second[p] are the floats
// of r cos(theta), r sin(theta) for r = sqrt(-2 log u1[p]), theta = 2 pi u2[p], and doubt[p] is nonzero
// where next_normal's margin test would fall back to libm (the caller then calls exact_pair). The log is
// musl's / fdlibm's e_log (the argument reduced to [sqrt(2)/2, sqrt(2)) by its exponent bits, then the
// Lg1-Lg7 polynomial in s = f / (2 + f): error below 1 ulp, as libm's), branch-free for positive normal
// arguments, which every u1 (a multiple of 2^-53 in (0, 1)) is; the sine and cosine are fast_sincos's,
// the quadrant's swap and signs done on the bits. One body for every target: inlined into a default and
// an AVX2 + FMA function, chosen at run time. A fused multiply-add moves these doubles by far less than
// the 2^-40 margin, so every target gives the same floats: those of exact_pair.
typedef double Double4 __attribute__((vector_size(32)));
typedef uint64_t Bits4 __attribute__((vector_size(32)));
typedef float Float4 __attribute__((vector_size(16)));
typedef int32_t Mask4 __attribute__((vector_size(16)));

[[gnu::always_inline]] inline void normal_pairs_body(const double* u1, const double* u2, float* first,
                                                     float* second, int32_t* doubt, size_t n) {
  for (size_t p = 0; p < n; p += 4) {
    Double4 x, t;
    __builtin_memcpy(&x, u1 + p, sizeof x);
    __builtin_memcpy(&t, u2 + p, sizeof t);
    // log(x) = k ln 2 + log(m), m = x 2^-k in [sqrt(2)/2, sqrt(2)).
    Bits4 bits = __builtin_bit_cast(Bits4, x) + ((0x3ff00000ull - 0x3fe6a09eull) << 32);
    const Bits4 kbits = (bits >> 52) | 0x4330000000000000ull;  // 2^52 + k + 1023
    const Double4 dk = __builtin_bit_cast(Double4, kbits) - (0x1p52 + 1023.0);
    bits = (bits & 0x000fffffffffffffull) + (0x3fe6a09eull << 32);
    const Double4 f = __builtin_bit_cast(Double4, bits) - 1.0;
    const Double4 hfsq = 0.5 * f * f;
    const Double4 sr = f / (2.0 + f);
    const Double4 z = sr * sr, w = z * z;
    const Double4 t1 = w * (3.999999999940941908e-01 + w * (2.222219843214978396e-01 + w * 1.531383769920937332e-01));
    const Double4 t2 =
        z * (6.666666666666735130e-01 +
             w * (2.857142874366239149e-01 + w * (1.818357216161805012e-01 + w * 1.479819860511658591e-01)));
    const Double4 log_x = sr * (hfsq + (t1 + t2)) + dk * 1.90821492927058770002e-10 - hfsq + f +
                          dk * 6.93147180369123816490e-01;
    Double4 r;  // sqrt(-2 log x), lane by lane (the argument is positive: no errno path is taken)
    for (int l = 0; l < 4; ++l) r[l] = __builtin_sqrt(-2.0 * log_x[l]);

    // fast_sincos, lane by lane the same operations.
    const Double4 theta = (2.0 * std::numbers::pi) * t;
    const Double4 shifted = theta * 6.36619772367581382433e-01 + 0x1.8p52;
    const Double4 fn = shifted - 0x1.8p52;
    const Bits4 q = __builtin_bit_cast(Bits4, shifted) & 3u;
    const Double4 y = (theta - fn * 1.57079632673412561417e+00) - fn * 6.07710050650619224932e-11;
    const Double4 yy = y * y;
    const Double4 sin_y =
        y + y * yy *
                (-1.66666666666666324348e-01 +
                 yy * (8.33333333332248946124e-03 +
                       yy * (-1.98412698298579493134e-04 +
                             yy * (2.75573137070700676789e-06 +
                                   yy * (-2.50507602534068634195e-08 + yy * 1.58969099521155010221e-10)))));
    const Double4 cos_y =
        1.0 - 0.5 * yy +
        yy * yy *
            (4.16666666666666019037e-02 +
             yy * (-1.38888888888741095749e-03 +
                   yy * (2.48015872894767294178e-05 +
                         yy * (-2.75573143513906633035e-07 +
                               yy * (2.08757232129817482790e-09 + yy * -1.13596475577881948265e-11)))));
    const Bits4 swap = -(q & 1u);  // all ones in odd quadrants
    const Bits4 sin_bits = __builtin_bit_cast(Bits4, sin_y), cos_bits = __builtin_bit_cast(Bits4, cos_y);
    const Bits4 c_bits = ((sin_bits & swap) | (cos_bits & ~swap)) ^ (((q + 1u) & 2u) << 62);  // - in 1, 2
    const Bits4 s_bits = ((cos_bits & swap) | (sin_bits & ~swap)) ^ ((q & 2u) << 62);         // - in 2, 3
    const Double4 v1 = r * __builtin_bit_cast(Double4, c_bits), v2 = r * __builtin_bit_cast(Double4, s_bits);
    // rounds_surely of both values, with next_normal's margins.
    const Double4 margin = r * 0x1p-40;
    const Double4 e1 = margin + __builtin_bit_cast(Double4, __builtin_bit_cast(Bits4, v1) & 0x7fffffffffffffffull) * 0x1p-40;
    const Double4 e2 = margin + __builtin_bit_cast(Double4, __builtin_bit_cast(Bits4, v2) & 0x7fffffffffffffffull) * 0x1p-40;
    const Float4 f1 = __builtin_convertvector(v1, Float4), f2 = __builtin_convertvector(v2, Float4);
    const Mask4 unsure = (__builtin_convertvector(v1 - e1, Float4) != __builtin_convertvector(v1 + e1, Float4)) |
                         (__builtin_convertvector(v2 - e2, Float4) != __builtin_convertvector(v2 + e2, Float4));
    __builtin_memcpy(first + p, &f1, sizeof f1);
    __builtin_memcpy(second + p, &f2, sizeof f2);
    __builtin_memcpy(doubt + p, &unsure, sizeof unsure);
  }
}

void normal_pairs_default(const double* u1, const double* u2, float* first, float* second, int32_t* doubt,
                          size_t n) {
  normal_pairs_body(u1, u2, first, second, doubt, n);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void normal_pairs_avx2(const double* u1, const double* u2, float* first,
                                                            float* second, int32_t* doubt, size_t n) {
  normal_pairs_body(u1, u2, first, second, doubt, n);
}
#endif

void normal_pairs(const double* u1, const double* u2, float* first, float* second, int32_t* doubt, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return normal_pairs_avx2(u1, u2, first, second, doubt, n);
#endif
  normal_pairs_default(u1, u2, first, second, doubt, n);
}

}  // namespace

// The pairs of next_normal() a chunk at a time: the uniforms drawn in sequence order (the rejection of
// u1 = 0 included), then normal_pairs, then per pair the square root, the same margin test as
// next_normal (whose 2^-40 also covers this log's error of an ulp or two against libm's) and exact_pair
// where the float rounding is in doubt. A spare left by next_normal comes first; an odd last value is
// next_normal's, which leaves its pair's second value as the spare, as n calls would.
//
// Drawing is serial (each uniform follows from the last state) and cheap; the transform is most of the
// work and depends on its pair alone, so a chunk's blocks of pairs are transformed over the thread pool
// (seeded weights of a 650M-parameter model: 650M values). Every value is the same on any number of
// threads.
void Generator::fill_normal(float* out, size_t n) {
  size_t i = 0;
  if (n > 0 && has_spare_) {
    has_spare_ = false;
    out[i++] = static_cast<float>(spare_normal_);
  }
  constexpr size_t kBlock = 512;         // pairs per normal_pairs call
  constexpr size_t kChunk = 128 * kBlock;  // pairs drawn before a parallel transform
  const size_t all_pairs = (n - i) / 2;
  std::vector<double> u1(std::min(kChunk, (all_pairs + 3) & ~size_t{3})), u2(u1.size());
  while (n - i >= 2) {
    const size_t pairs = std::min(kChunk, (n - i) / 2);
    // next_uniform() with the state in registers.
    uint64_t s0 = s_[0], s1 = s_[1], s2 = s_[2], s3 = s_[3];
    const auto uniform = [&] { return uniform_of(xoshiro_step(s0, s1, s2, s3)); };
    for (size_t p = 0; p < pairs; ++p) {
      double a = uniform();
      while (a <= 0.0) a = uniform();
      u1[p] = a;
      u2[p] = uniform();
    }
    s_ = {s0, s1, s2, s3};
    const size_t padded = (pairs + 3) & ~size_t{3};
    for (size_t p = pairs; p < padded; ++p) u1[p] = u2[p] = 0.5;
    float* dst = out + i;
    const auto transform = [&](int64_t b0, int64_t b1) {
      alignas(64) float first[kBlock], second[kBlock];
      alignas(64) int32_t doubt[kBlock];
      for (auto b = static_cast<size_t>(b0); b < static_cast<size_t>(b1); ++b) {
        const size_t p0 = b * kBlock, count = std::min(kBlock, pairs - p0);
        normal_pairs(&u1[p0], &u2[p0], first, second, doubt, (count + 3) & ~size_t{3});
        for (size_t p = 0; p < count; ++p) {
          if (doubt[p] != 0) {
            double x = 0, y = 0;
            exact_pair(u1[p0 + p], u2[p0 + p], x, y);
            first[p] = static_cast<float>(x);
            second[p] = static_cast<float>(y);
          }
          dst[2 * (p0 + p)] = first[p];
          dst[2 * (p0 + p) + 1] = second[p];
        }
      }
    };
    parallel_for(0, static_cast<int64_t>((pairs + kBlock - 1) / kBlock), 4, transform);
    i += 2 * pairs;
  }
  if (i < n) out[i] = static_cast<float>(next_normal());
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace sightline

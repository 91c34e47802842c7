#include <bit>
#include <cmath>
#include <numbers>

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

}  // namespace

Generator::Generator(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t Generator::next_u64() {  // xoshiro256**
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::next_uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

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

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator() = Generator(seed); }

}  // namespace sightline

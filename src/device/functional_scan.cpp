// The Vector engine's scan and index instructions: tensor_scan (cumulative add / max / min along the
// free axis), max8 (the k <= 8 largest values of a row, descending) and find_index8 (the indices of given
// values in a row). Semantics in sightline/device/isa.h; they compute in f32 like the other ALU ops.
#include <algorithm>
#include <array>
#include <cmath>

#include "device/functional.h"
#include "sightline/error.h"

namespace sightline::device {
namespace {

// max8's order: NaN above every number (torch.argmax / topk pick NaN first), then by value.
bool ranks_above(float a, float b) {
  if (std::isnan(a)) return !std::isnan(b);
  if (std::isnan(b)) return false;
  return a > b;
}

bool same_value(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

void FunctionalExecutor::scan(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const size_t n = a.elements;
  a_.resize(n);
  c_.resize(n);
  const AluOp op = in.alu();
  for (uint32_t p = 0; p < a.partitions; ++p) {
    const float* av = load_f32(a, p, a_.data());
    float acc = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      const float x = av[i];
      if (i == 0) {
        acc = x;
      } else if (op == AluOp::add) {
        acc = acc + x;
      } else if (op == AluOp::max) {
        acc = std::isnan(acc) || std::isnan(x) ? std::nanf("") : std::max(acc, x);
      } else {
        acc = std::isnan(acc) || std::isnan(x) ? std::nanf("") : std::min(acc, x);
      }
      c_[i] = acc;
    }
    store(dst, p, c_.data());
  }
}

void FunctionalExecutor::top_values(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0");
  const size_t n = a.elements, k = dst.elements;
  a_.resize(n);
  for (uint32_t p = 0; p < a.partitions; ++p) {
    const float* av = load_f32(a, p, a_.data());
    // An insertion into a sorted buffer of k, as the engine keeps one per lane.
    std::array<float, 8> top{};
    size_t held = 0;
    for (size_t i = 0; i < n; ++i) {
      const float x = av[i];
      if (held == k && !ranks_above(x, top[k - 1])) continue;
      size_t at = std::min(held, k - 1);
      while (at > 0 && ranks_above(x, top[at - 1])) {
        top[at] = top[at - 1];
        --at;
      }
      top[at] = x;
      held = std::min(held + 1, k);
    }
    store(dst, p, top.data());
  }
}

void FunctionalExecutor::find_indices(const Instruction& in) {
  const View dst = view(in.dst, "dst"), a = view(in.src0, "src0"), values = view(in.src1, "src1");
  const size_t n = a.elements, k = dst.elements;
  a_.resize(n);
  for (uint32_t p = 0; p < a.partitions; ++p) {
    const float* av = load_f32(a, p, a_.data());
    std::array<float, 8> want{}, found{};
    load(values, p, want.data());
    for (size_t j = 0; j < k; ++j) {
      // Equal values earlier in `want` took the earlier matches: start after the last of them.
      size_t from = 0;
      for (size_t e = 0; e < j; ++e) {
        if (same_value(want[e], want[j])) from = static_cast<size_t>(found[e]) + 1;
      }
      size_t i = from;
      while (i < n && !same_value(av[i], want[j])) ++i;
      SIGHTLINE_CHECK(i < n, "find_index8: partition {}: value {} (entry {} of src1) is not in src0's {} elements",
                      p, want[j], j, n);
      found[j] = static_cast<float>(i);
    }
    store(dst, p, found.data());
  }
}

}  // namespace sightline::device

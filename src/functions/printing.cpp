// PyTorch-like printing: the same number formats (integer mode "3.", fixed "0.1235", scientific
// "1.2346e-05") and summarization ("...") above 1000 elements with 3 edge items.
#include <algorithm>
#include <cmath>
#include <vector>

#include "sightline/backend.h"

namespace sightline {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kPrecision = 4;

enum class Mode { integer, fixed, scientific };

struct Printer {
  const Tensor& t;  // contiguous f32 copy on the host (or i32)
  bool is_int;
  bool is_bool;  // prints True / False, as torch does
  bool summarize;
  Mode mode = Mode::fixed;
  size_t width = 1;
  std::vector<double> values;  // flattened
  Dims strides;

  std::string number(double v) const {
    if (is_bool) return v != 0 ? "True" : "False";
    if (is_int) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::integer: return fmt::format("{:.0f}.", v);
      case Mode::fixed: return fmt::format("{:.{}f}", v, kPrecision);
      case Mode::scientific: return fmt::format("{:.{}e}", v, kPrecision);
    }
    return "";
  }

  // Mirrors torch's _tensor_str: items joined by ", " in the last dim and by ",\n...\n" + indent
  // above it; a summarized dim shows its edge items around a "..." item.
  void recurse(std::string& out, int dim, int64_t offset, int indent) const {
    const Dims& shape = t.shape();
    if (dim == shape.size()) {
      const std::string s = number(values[static_cast<size_t>(offset)]);
      out.append(width - std::min(width, s.size()), ' ');
      out += s;
      return;
    }
    const int64_t n = shape[dim];
    const bool cut = summarize && n > 2 * kEdgeItems;
    const bool last = dim == shape.size() - 1;
    std::string separator = last ? ", " : ",";
    if (!last) {
      separator.append(static_cast<size_t>(shape.size() - dim - 1), '\n');
      separator.append(static_cast<size_t>(indent + 1), ' ');
    }
    out += '[';
    for (int64_t i = 0; i < n; ++i) {
      if (i > 0) out += separator;
      if (cut && i == kEdgeItems) {
        out += last ? " ..." : "...";
        out += separator;
        i = n - kEdgeItems;
      }
      recurse(out, dim + 1, offset + i * strides[dim], indent + 1);
    }
    out += ']';
  }
};

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const bool is_int = dtype() == DType::i32;
  const bool is_bool = dtype() == DType::boolean;
  Tensor host = to(Device::cpu()).contiguous();
  if (!is_int && dtype() != DType::f32) host = host.to(DType::f32);
  Printer p{host, is_int, is_bool, numel() > kSummarizeThreshold, Mode::fixed, 1, {}, {}};
  p.values.resize(static_cast<size_t>(numel()));
  if (is_int) {
    const int32_t* src = host.data<int32_t>();
    for (size_t i = 0; i < p.values.size(); ++i) p.values[i] = src[i];
  } else {
    const float* src = host.data<float>();
    for (size_t i = 0; i < p.values.size(); ++i) p.values[i] = src[i];
  }
  p.strides = contiguous_strides(shape());
  if (!is_int && !is_bool) {
    double max_abs = 0, min_abs = INFINITY;
    bool all_integral = true;
    for (double v : p.values) {
      if (!std::isfinite(v)) continue;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
      all_integral = all_integral && v == std::nearbyint(v);
    }
    // torch's _Formatter: integral values print as "3." unless their range is wide; other values
    // print fixed with 4 decimals unless tiny, huge or spread over more than 3 decades.
    const bool wide = min_abs != INFINITY && (max_abs / min_abs > 1e3 || max_abs > 1e8);
    if (all_integral) {
      p.mode = wide ? Mode::scientific : Mode::integer;
    } else if (wide || (min_abs != INFINITY && min_abs < 1e-4)) {
      p.mode = Mode::scientific;
    }
  }
  for (double v : p.values) p.width = std::max(p.width, p.number(v).size());
  std::string out = "tensor(";
  if (dim() == 0 && numel() == 1) {
    out += p.number(p.values[0]);
  } else {
    p.recurse(out, 0, 0, 7);
  }
  std::vector<std::string> suffix;
  // torch names no dtype for the ones a literal implies (float32, int64, bool); sightline's int is i32.
  if (dtype() != DType::f32 && dtype() != DType::i32 && dtype() != DType::boolean)
    suffix.push_back(fmt::format("dtype={}", dtype()));
  if (dtype() == DType::i32) suffix.push_back("dtype=i32");
  if (!device().is_cpu()) suffix.push_back(fmt::format("device='{}'", device()));
  if (numel() == 0) suffix.push_back(fmt::format("size={}", shape()));
  for (const auto& s : suffix) out += ", " + s;
  out += ')';
  return out;
}

}  // namespace sightline

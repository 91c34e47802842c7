// A float64 reference for every op, written independently of the kernels under test: plain index
// arithmetic over row-major double vectors. Inputs are read through the public API (copied to the
// host as f32, which is exact for every dtype we have).
#pragma once

#include <functional>
#include <vector>

#include "sightline/sightline.h"

namespace sightline::testing {

struct Ref {
  Dims shape;
  std::vector<double> v;
};

Ref to_ref(const Tensor& t);
int64_t flat_index(const Dims& shape, const Dims& index);
Dims unravel(const Dims& shape, int64_t flat);

Ref ref_binary(const Ref& a, const Ref& b, const std::function<double(double, double)>& f);
Ref ref_unary(const Ref& a, const std::function<double(double)>& f);
Ref ref_reduce(const Ref& a, const Dims& dims, bool keepdim, int kind);  // 0 sum, 1 mean, 2 max
Ref ref_softmax(const Ref& a, int dim, bool log_form);
Ref ref_matmul(const Ref& a, const Ref& b);
Ref ref_rms_norm(const Ref& x, const Ref* w, double eps);
Ref ref_layer_norm(const Ref& x, const Ref* w, const Ref* b, double eps);

// Rounds every value to `dtype`'s grid, as the kernel's single final rounding does.
Ref round_to(const Ref& r, DType dtype);

}  // namespace sightline::testing

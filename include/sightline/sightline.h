// sightline: a C++ inference runtime whose first job is to explain where the time goes.
//
//   #include <sightline/sightline.h>
//   using namespace sightline;
//   Tensor x = randn({4096, 4096});
//   Tensor w = ones({4096});
//   Tensor y = x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;  // naive RMSNorm: 6 ops
//   Tensor z = rms_norm(x, w, 1e-6);                          // the fused built-in: 1 op
//
// The nouns: Tensor and Storage (tensor.h), Op (ops.h: the op table), Backend (backend.h).
#pragma once

#include "sightline/backend.h"
#include "sightline/dtype.h"
#include "sightline/error.h"
#include "sightline/ops.h"
#include "sightline/tensor.h"

// The view ops of the op table (is_view): metadata-only, the same for every backend. The dispatcher
// calls apply_view_op instead of a backend kernel.
#pragma once

#include "sightline/ops.h"

namespace sightline {

Tensor apply_view_op(const OpCall& call);

}  // namespace sightline

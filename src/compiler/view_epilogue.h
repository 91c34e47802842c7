// The plan of a matmul epilogue over views of the result (the heads of a projection: view, permute,
// slice / chunk, cat, neg, mul, add with broadcast operands, as rotary embeddings are written): every
// value of the group resolved to the positions it takes in the matmul's [rows, n] result, so that each
// op runs on a result tile (whole rows on partitions, n on the free axis) as an elementwise instruction
// whose operands are free patterns of up to four dims over the tile's row (heads x head_dim, or heads x
// half a head for the halves rotate_half moves). Pure: the lowering (lower.cpp) emits it.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "compiler/graph.h"
#include "kernels/eager.h"

namespace sightline::compiler {

// Positions along a tile's row (elements): an offset and free dims, outermost first.
struct RowPattern {
  int64_t offset = 0;
  std::vector<device::FreeDim> dims;
};

// An operand of a step.
struct EpilogueOperand {
  enum class Kind : uint8_t { value, tensor, scalar };
  Kind kind = Kind::value;
  // value: the buffer holding it (0: the matmul's result tile) and its positions there.
  int buffer = 0;
  RowPattern at;  // tensor: its positions in its own operand buffer (stride 0 along broadcast dims)
  // tensor: body input `input`, loaded per tile into a buffer of `loaded` elements per row: row r of the
  // result reads elements hbm_offset(r) + the free dims `hbm` (in order, `loaded` elements contiguous).
  int input = -1;
  uint32_t loaded = 0;
  std::vector<device::FreeDim> hbm;
  int64_t hbm_base = 0;
  std::vector<int64_t> row_sizes, row_steps, row_hbm_strides;  // row r -> index (r / step) % size
  double scalar = 0;  // scalar

  int64_t hbm_offset(int64_t row) const {
    int64_t off = hbm_base;
    for (size_t d = 0; d < row_sizes.size(); ++d) off += (row / row_steps[d]) % row_sizes[d] * row_hbm_strides[d];
    return off;
  }
};

// `at` on the result tile that holds columns [c0, c0 + width) of its rows, in the tile's coordinates:
// the outermost free dim restricted to the blocks inside that window (nullopt when the window does not
// cut the pattern at its outermost dim's blocks); `first` receives the first block's index. A pattern
// with no block in the window has an outermost size of 0.
std::optional<RowPattern> restrict_to_columns(const RowPattern& at, int64_t cols, int64_t c0, int64_t width,
                                              int64_t* first = nullptr);

// One op on a tile: writes `out` of buffer `buffer` from its operands. A cat is one copy per input,
// operand k to `pieces[k]`; a view emits nothing and has no step.
struct EpilogueStep {
  const Node* node = nullptr;
  int buffer = 0;
  RowPattern out;
  std::vector<EpilogueOperand> operands;
  std::vector<RowPattern> pieces;  // cat
};

struct ViewEpiloguePlan {
  int64_t rows = 0, cols = 0;  // the matmul's result as [rows, cols]
  int buffers = 1;             // value buffers, the result tile (0) included
  std::vector<EpilogueStep> steps;
  // Where the group's value is in the stored result: element offset and its shape's strides.
  int64_t offset = 0;
  Dims strides;
};

// The plan of a fused.matmul_epilogue body (its first op the matmul) whose ops map back to the result,
// with the body's inputs described by `inputs`; else why not (the executable's metadata records it).
std::variant<ViewEpiloguePlan, std::string> plan_view_epilogue(const Graph& body,
                                                               std::span<const kernels::TensorDesc> inputs);

// Whether a fused.matmul_epilogue body goes beyond a chain of same-shape ops on the result (a view, a
// cat, or a value read twice): the bodies plan_view_epilogue is for.
bool epilogue_has_views(const Graph& body);

}  // namespace sightline::compiler

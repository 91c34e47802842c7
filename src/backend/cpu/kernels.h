// The CPU reference kernels, one per op of the op table (cpu_backend.cpp fills the kernel array).
// All of them accept non-contiguous and broadcast inputs; floating types compute in f32 and round
// once to the output dtype, as PyTorch's CPU kernels do.
#pragma once

#include "sightline/ops.h"

namespace sightline::cpu {

void binary_kernel(const OpCall& call, Tensor& out);   // add sub rsub mul div maximum minimum
void compare_kernel(const OpCall& call, Tensor& out);  // eq ne lt le gt ge: bool out
void select_kernel(const OpCall& call, Tensor& out);   // where masked_fill
void unary_kernel(const OpCall& call, Tensor& out);   // neg abs exp ... gelu, pow
void fill_kernel(const OpCall& call, Tensor& out);
void to_copy_kernel(const OpCall& call, Tensor& out);
void contiguous_kernel(const OpCall& call, Tensor& out);
void reduce_kernel(const OpCall& call, Tensor& out);  // sum mean amax
void softmax_kernel(const OpCall& call, Tensor& out);  // softmax log_softmax
void matmul_kernel(const OpCall& call, Tensor& out);
void linear_kernel(const OpCall& call, Tensor& out);
void rms_norm_kernel(const OpCall& call, Tensor& out);
void layer_norm_kernel(const OpCall& call, Tensor& out);
void cat_kernel(const OpCall& call, Tensor& out);
void embedding_kernel(const OpCall& call, Tensor& out);
void attention_kernel(const OpCall& call, Tensor& out);  // scaled_dot_product_attention
void cumsum_kernel(const OpCall& call, Tensor& out);
void argmax_kernel(const OpCall& call, Tensor& out);
void topk_kernel(const OpCall& call, Tensor& out);  // out: the values; call.more_outputs[0]: the indices

// The input converted to `dtype` (a contiguous copy) when its dtype differs, else itself.
Tensor as_dtype(const Tensor& t, DType dtype);

}  // namespace sightline::cpu

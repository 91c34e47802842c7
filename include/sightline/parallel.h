// Tensor parallelism over the NeuronCores of one process, as Megatron-LM and NeuronX Distributed shard a
// model: a list of tensors, one per rank (rank r on devices[r]), with the collectives of neuron.h between
// them.
//
//   std::vector<Device> tp = parallel::devices(2);                        // neuron:0, neuron:1
//   auto w_up = parallel::shard(w_up_full, 0, tp);                        // [out / 2, in] per rank
//   auto w_down = parallel::shard(w_down_full, 1, tp);                    // [out, in / 2] per rank
//   auto x = parallel::replicate(x_full, tp);
//   auto h = parallel::column_parallel_linear(x, w_up);                   // each rank: its slice of the outputs
//   auto y = parallel::row_parallel_linear(h, w_down);                    // all-reduced: the full y on every rank
//
// A column-parallel linear splits the weight's output features (no communication; each rank holds its
// slice of the result, gathered on request); a row-parallel linear splits its input features, and the
// partial products are summed by an all-reduce. A column-parallel layer followed by a row-parallel one
// (an MLP, attention's projections) communicates once.
#pragma once

#include <cstdint>
#include <vector>

#include "sightline/tensor.h"

namespace sightline::parallel {

// neuron:0 .. neuron:(ranks - 1). Throws when the device has fewer cores.
std::vector<Device> devices(int ranks);
// Chunk r of `t` along `dim` on devices[r]; size(dim) must divide by the number of devices.
std::vector<Tensor> shard(const Tensor& t, int64_t dim, const std::vector<Device>& devices);
// `t` on every device.
std::vector<Tensor> replicate(const Tensor& t, const std::vector<Device>& devices);

// y_r = x_r W_r^T (+ b_r), W_r = rows r of the weight ([out / ranks, in]); with gather_output every rank
// receives the whole [.., out] (an all-gather along the last dim).
std::vector<Tensor> column_parallel_linear(const std::vector<Tensor>& x, const std::vector<Tensor>& weight,
                                           const std::vector<Tensor>& bias = {}, bool gather_output = false);
// y = sum_r x_r W_r^T (+ b), W_r = columns r of the weight ([out, in / ranks]), x_r already split along its
// last dim (input_is_parallel); the sum is an all-reduce, and the bias (replicated) is added after it.
std::vector<Tensor> row_parallel_linear(const std::vector<Tensor>& x, const std::vector<Tensor>& weight,
                                        const std::vector<Tensor>& bias = {});

}  // namespace sightline::parallel

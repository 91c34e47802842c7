// sightline::parallel (include/sightline/parallel.h): Megatron-style column/row parallel linears over
// one tensor per core, with neuron's collectives between them.
#include "sightline/parallel.h"

#include "sightline/error.h"
#include "sightline/neuron.h"
#include "sightline/ops.h"

namespace sightline::parallel {
namespace {

void check_ranks(const char* what, const std::vector<Tensor>& x, const std::vector<Tensor>& weight,
                 const std::vector<Tensor>& bias) {
  SIGHTLINE_CHECK(!x.empty() && x.size() == weight.size(),
                  "parallel::{}: {} input shards but {} weight shards; pass one of each per rank", what, x.size(),
                  weight.size());
  SIGHTLINE_CHECK(bias.empty() || bias.size() == weight.size(),
                  "parallel::{}: {} bias shards for {} ranks; pass none or one per rank", what, bias.size(),
                  weight.size());
  for (size_t r = 0; r < x.size(); ++r) {
    SIGHTLINE_CHECK(x[r].device() == weight[r].device(),
                    "parallel::{}: rank {}'s input is on {} but its weight on {}; each rank's shards live on its core",
                    what, r, x[r].device(), weight[r].device());
  }
}

}  // namespace

std::vector<Device> devices(int ranks) {
  const int cores = neuron::device_info().cores;
  SIGHTLINE_CHECK(ranks >= 1 && ranks <= cores,
                  "parallel::devices: {} ranks asked, but the {} device has {} cores (neuron:0..neuron:{})", ranks,
                  neuron::device_info().spec_name, cores, cores - 1);
  std::vector<Device> out;
  for (int r = 0; r < ranks; ++r) out.push_back(Device::parse("neuron:" + std::to_string(r)));
  return out;
}

std::vector<Tensor> shard(const Tensor& t, int64_t dim, const std::vector<Device>& devices) {
  const auto ranks = static_cast<int64_t>(devices.size());
  const int d = static_cast<int>(dim < 0 ? dim + static_cast<int64_t>(t.shape().size()) : dim);
  SIGHTLINE_CHECK(ranks >= 1 && d >= 0 && d < static_cast<int>(t.shape().size()) && t.size(d) % ranks == 0,
                  "parallel::shard: a tensor of shape {} does not split into {} equal shards along dim {}", t.shape(),
                  ranks, dim);
  const int64_t per = t.size(d) / ranks;
  std::vector<Tensor> out;
  for (int64_t r = 0; r < ranks; ++r) out.push_back(t.slice(d, r * per, (r + 1) * per).contiguous().to(devices[static_cast<size_t>(r)]));
  return out;
}

std::vector<Tensor> replicate(const Tensor& t, const std::vector<Device>& devices) {
  std::vector<Tensor> out;
  for (const Device& device : devices) out.push_back(t.to(device));
  return out;
}

std::vector<Tensor> column_parallel_linear(const std::vector<Tensor>& x, const std::vector<Tensor>& weight,
                                           const std::vector<Tensor>& bias, bool gather_output) {
  check_ranks("column_parallel_linear", x, weight, bias);
  std::vector<Tensor> y;
  for (size_t r = 0; r < x.size(); ++r) y.push_back(bias.empty() ? linear(x[r], weight[r]) : linear(x[r], weight[r], bias[r]));
  if (gather_output && y.size() > 1) y = neuron::all_gather(y, -1);
  return y;
}

std::vector<Tensor> row_parallel_linear(const std::vector<Tensor>& x, const std::vector<Tensor>& weight,
                                        const std::vector<Tensor>& bias) {
  check_ranks("row_parallel_linear", x, weight, bias);
  std::vector<Tensor> partial;
  for (size_t r = 0; r < x.size(); ++r) partial.push_back(linear(x[r], weight[r]));
  std::vector<Tensor> y = partial.size() > 1 ? neuron::all_reduce(partial) : partial;
  if (!bias.empty()) {
    for (size_t r = 0; r < y.size(); ++r) y[r] = y[r] + bias[r];
  }
  return y;
}

}  // namespace sightline::parallel

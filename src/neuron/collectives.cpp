// neuron::all_reduce / all_gather / reduce_scatter (include/sightline/neuron.h): checks the shards, runs
// the framework op scope, and queues one collective on the runtime (runtime/runtime.h, device/collective.h).
#include <set>

#include "neuron/neuron.h"
#include "sightline/error.h"
#include "sightline/host_clock.h"
#include "sightline/profiler/record.h"

namespace sightline::neuron {
namespace {

// The framework op of each collective, named as torch.profiler shows c10d's.
profiler::NameId op_name(device::CollectiveKind kind) {
  static const profiler::NameId all_reduce = profiler::intern("c10d::allreduce_");
  static const profiler::NameId all_gather = profiler::intern("c10d::_allgather_base_");
  static const profiler::NameId reduce_scatter = profiler::intern("c10d::_reduce_scatter_base_");
  switch (kind) {
    case device::CollectiveKind::all_reduce: return all_reduce;
    case device::CollectiveKind::all_gather: return all_gather;
    case device::CollectiveKind::reduce_scatter: return reduce_scatter;
  }
  return all_reduce;
}

std::vector<Tensor> run(device::CollectiveKind kind, const std::vector<Tensor>& shards, int64_t dim) {
  const std::string_view what = device::collective_name(kind);
  SIGHTLINE_CHECK(!shards.empty(), "neuron::{}: no tensors; pass one tensor per participating core", what);
  const Tensor& first = shards.front();
  std::set<int> cores;
  for (size_t r = 0; r < shards.size(); ++r) {
    const Tensor& t = shards[r];
    SIGHTLINE_CHECK(t.defined() && t.device().to_string().starts_with("neuron"),
                    "neuron::{}: tensor {} is {}; every shard must be on a neuron core (move it with .to(\"neuron:k\"))",
                    what, r, t.defined() ? "on " + t.device().to_string() : std::string("undefined"));
    SIGHTLINE_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype(),
                    "neuron::{}: tensor {} is {} {} but tensor 0 is {} {}; every rank's shard must have one shape and "
                    "dtype",
                    what, r, dtype_name(t.dtype()), t.shape(), dtype_name(first.dtype()), first.shape());
    SIGHTLINE_CHECK(cores.insert(t.device().index).second,
                    "neuron::{}: two shards are on {}; each rank must be a different core", what, t.device());
  }
  SIGHTLINE_CHECK(kind == device::CollectiveKind::all_gather || first.dtype() != DType::boolean,
                  "neuron::{}: cannot sum bool tensors; sums are f32, bf16, f16 or i32 (cast with .to())", what);
  const int ranks = static_cast<int>(shards.size());
  const int rank_dims = static_cast<int>(first.shape().size());
  if (kind != device::CollectiveKind::all_reduce) {
    SIGHTLINE_CHECK(rank_dims >= 1 && dim >= -rank_dims && dim < rank_dims,
                    "neuron::{}: dim {} is out of range for shards of shape {}", what, dim, first.shape());
    if (dim < 0) dim += rank_dims;
  }
  if (kind == device::CollectiveKind::reduce_scatter) {
    SIGHTLINE_CHECK(first.size(static_cast<int>(dim)) % ranks == 0,
                    "neuron::reduce_scatter: size {} of dim {} does not divide into {} ranks", first.size(static_cast<int>(dim)),
                    dim, ranks);
  }

  profiler::ScopeHandle scope = profiler::record_op_begin(op_name(kind));
  host_clock::charge_framework_op();
  std::vector<Tensor> inputs, outputs;
  // The ring moves contiguous chunks of dim 0: another dim goes first, and comes back as a view.
  const int d = static_cast<int>(dim);
  for (const Tensor& t : shards) inputs.push_back((d == 0 ? t : t.transpose(0, d)).contiguous());
  Dims out_shape = inputs.front().shape();
  if (kind == device::CollectiveKind::all_gather) out_shape[0] *= ranks;
  if (kind == device::CollectiveKind::reduce_scatter) out_shape[0] /= ranks;
  runtime::Runtime::CollectiveRequest request;
  request.kind = kind;
  request.dtype = first.dtype();
  const uint64_t in_bytes = static_cast<uint64_t>(first.numel()) * first.element_size();
  request.bytes = kind == device::CollectiveKind::all_gather ? in_bytes * static_cast<uint64_t>(ranks) : in_bytes;
  request.correlation = profiler::current_correlation_id();
  for (const Tensor& in : inputs) {
    outputs.push_back(empty(out_shape, TensorOptions(in.dtype(), in.device())));
    request.cores.push_back(in.device().index);
    request.inputs.push_back(device_address(in));
    request.outputs.push_back(device_address(outputs.back()));
  }
  try {
    runtime().collective(request);
  } catch (...) {
    profiler::record_op_end(scope);
    throw;
  }
  profiler::record_op_end(scope);
  if (d != 0) {
    for (Tensor& out : outputs) out = out.transpose(0, d);
  }
  return outputs;
}

}  // namespace

std::vector<Tensor> all_reduce(const std::vector<Tensor>& shards) {
  return run(device::CollectiveKind::all_reduce, shards, 0);
}

std::vector<Tensor> all_gather(const std::vector<Tensor>& shards, int64_t dim) {
  return run(device::CollectiveKind::all_gather, shards, dim);
}

std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& shards, int64_t dim) {
  return run(device::CollectiveKind::reduce_scatter, shards, dim);
}

}  // namespace sightline::neuron

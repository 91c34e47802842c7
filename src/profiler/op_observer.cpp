#include "profiler/op_observer.h"

#include <array>
#include <atomic>
#include <vector>

#include "profiler/stack.h"
#include "sightline/profiler/record.h"
#include "sightline/backend.h"

namespace sightline::profiler {
namespace {

std::atomic<bool> g_with_flops{false};

// Interned profiler names of the op table, computed once.
const std::array<NameId, kOpCount>& op_names() {
  static const std::array<NameId, kOpCount> names = [] {
    std::array<NameId, kOpCount> n{};
    for (const OpInfo& info : kOpTable) n[static_cast<size_t>(info.id)] = intern(info.name);
    return n;
  }();
  return names;
}

// Open op scopes of this thread, innermost last (ops nest: reshape -> contiguous).
thread_local std::vector<ScopeHandle> t_open_ops;

uint64_t before_op(const OpCall& call, void*) {
  PayloadId payload = 0;
  if (shapes_requested()) {
    std::array<ShapeView, 8> shapes{};
    const size_t n = std::min(call.inputs.size(), shapes.size());
    for (size_t i = 0; i < n; ++i) {
      if (call.inputs[i].defined()) shapes[i] = call.inputs[i].shape().span();
    }
    payload = record_shapes_payload(std::span<const ShapeView>(shapes.data(), n));
  }
  // Taken before the op opens, so that walking the caller's frames is not inside the op's time.
  const PayloadId stack = capture_stack();
  ScopeHandle& scope = t_open_ops.emplace_back(record_op_begin(op_names()[static_cast<size_t>(call.op)], payload));
  scope.stack = stack;
  return 0;
}

void after_op(const OpCall& call, const Tensor& out, uint64_t, void*) {
  if (t_open_ops.empty()) return;  // the trace started while this op was running
  ScopeHandle scope = t_open_ops.back();
  t_open_ops.pop_back();
  if (g_with_flops.load(std::memory_order_relaxed) && out.defined()) {
    scope.value = static_cast<uint64_t>(op_cost(call, out).flops);
  }
  record_op_end(scope);
}

const DispatchObserver kObserver{&before_op, &after_op, nullptr};

}  // namespace

void start_op_recording(const OpRecordingOptions& options) {
  op_names();
  g_with_flops.store(options.with_flops, std::memory_order_relaxed);
  set_dispatch_observer(&kObserver);
}

void stop_op_recording() { set_dispatch_observer(nullptr); }

}  // namespace sightline::profiler

// The capture backend, the thread-local graph being recorded, and the rebuilding of views.
#include "compiler/capture.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/view_meta.h"
#include "sightline/backend.h"

namespace sightline::compiler {
namespace {

struct CaptureContext {
  Graph graph;
  Device target;
  std::unordered_map<const Storage*, int> value_of_storage;  // proxies' storages -> the value they hold
  std::vector<std::shared_ptr<Storage>> keep_alive;          // so that storage addresses are never reused
  std::map<std::tuple<int, std::string, std::string, int64_t>, int> views;  // rebuilt views, by layout
  bool fullgraph = true;  // a graph break is an error
  int ops_recorded = 0;   // ops the function dispatched so far (views excluded): a break's op_index
  double flops = 0;       // of those ops (graph breaks included), by the op table's rule
  // Graph breaks: the op of each, with its outputs as placeholder nodes of `graph` (input nodes with
  // input_index -1, which split() replaces by the eager step they stand for).
  std::vector<EagerStep> breaks;
  std::unordered_map<int, int> break_of_node;  // placeholder node -> index in `breaks`
};

thread_local CaptureContext* t_capture = nullptr;

constexpr std::string_view kMoveOutHint =
    "move it outside the compiled function (return the tensor and read it after the call)";

std::string producer_name(const Storage& storage) {
  if (t_capture == nullptr) return "a captured op";
  auto it = t_capture->value_of_storage.find(&storage);
  if (it == t_capture->value_of_storage.end()) return "a captured op";
  const Node& n = t_capture->graph.nodes[static_cast<size_t>(it->second)];
  if (auto b = t_capture->break_of_node.find(it->second); b != t_capture->break_of_node.end()) {
    return fmt::format("{} (a graph break, run eagerly)", t_capture->breaks[static_cast<size_t>(b->second)].info.op);
  }
  if (n.kind == NodeKind::input) return fmt::format("argument {} of the compiled function", n.input_index);
  return fmt::format("{} (node %{})", op_name(n.op), it->second);
}

CaptureContext& current_context(OpId op) {
  SIGHTLINE_CHECK(t_capture != nullptr,
                  "{}: a tensor traced by compile() (device capture:0) was used outside the function being "
                  "compiled; only use the tensors a compiled function returns",
                  op_name(op));
  return *t_capture;
}

// A step of a rebuilt view.
struct ViewStep {
  OpId op;
  OpAttrs attrs;
};

Tensor apply_view_step(const Tensor& x, const ViewStep& step) {
  const OpAttrs& a = step.attrs;
  switch (step.op) {
    case OpId::slice:
      return view_meta::slice(x, static_cast<int>(a.dim), a.start, a.end, a.step);
    case OpId::permute:
      return view_meta::permute(x, a.dims);
    case OpId::expand:
      return view_meta::expand(x, a.dims);
    case OpId::reshape: {
      auto strides = view_meta::view_strides(x, a.dims);
      if (!strides) return {};  // not a view: this candidate does not rebuild the proxy's view
      return Tensor(x.storage(), x.dtype(), a.dims, *strides, x.offset());
    }
    default:
      break;
  }
  SIGHTLINE_ASSERT_MSG(false, "unexpected view step {}", op_name(step.op));
  return {};
}

bool same_view(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.offset() != b.offset()) return false;
  for (int d = 0; d < a.dim(); ++d) {
    if (a.shape()[d] > 1 && a.strides()[d] != b.strides()[d]) return false;  // size-1 strides address nothing
  }
  return true;
}

// Expresses `view` (shape, strides, offset over a contiguous value of shape `base_shape`) as slice,
// permute, reshape and expand steps: each dim of the view with size > 1 and a non-zero stride is a
// (possibly strided) slice of one dim of the base; the offset picks the start in every base dim; the
// remaining dims are size 1 or broadcast. Returns false when the view is not of that form.
bool rebuild_from(const Dims& base_shape, const Tensor& view, std::vector<ViewStep>& steps) {
  const Dims base_strides = contiguous_strides(base_shape);
  const int base_rank = base_shape.size();
  const int rank = view.dim();
  std::array<int, kMaxDims> base_dim_of{};  // view dim -> base dim, -1 for size-1 and broadcast dims
  std::array<int, kMaxDims> view_dim_of{};  // base dim -> view dim, -1 when the base dim is selected away
  std::array<int64_t, kMaxDims> step_of{};
  base_dim_of.fill(-1);
  view_dim_of.fill(-1);
  // Match the view's dims in order of decreasing stride, so outer dims claim outer base dims first.
  std::array<int, kMaxDims> by_stride{};
  for (int d = 0; d < rank; ++d) by_stride[static_cast<size_t>(d)] = d;
  std::stable_sort(by_stride.begin(), by_stride.begin() + rank,
                   [&](int a, int b) { return view.strides()[a] > view.strides()[b]; });
  for (int i = 0; i < rank; ++i) {
    const int d = by_stride[static_cast<size_t>(i)];
    const int64_t size = view.shape()[d], stride = view.strides()[d];
    if (size <= 1 || stride == 0) continue;
    if (stride < 0) return false;
    int chosen = -1;
    for (int j = 0; j < base_rank; ++j) {  // outermost first: the largest stride that divides
      if (view_dim_of[static_cast<size_t>(j)] != -1 || base_shape[j] <= 1 || stride % base_strides[j] != 0)
        continue;
      if ((size - 1) * (stride / base_strides[j]) < base_shape[j]) {
        chosen = j;
        break;
      }
    }
    if (chosen < 0) return false;
    base_dim_of[static_cast<size_t>(d)] = chosen;
    view_dim_of[static_cast<size_t>(chosen)] = d;
    step_of[static_cast<size_t>(chosen)] = stride / base_strides[chosen];
  }
  // The offset in the contiguous base is a mixed-radix number whose digits are the starts.
  int64_t remaining = view.offset();
  if (remaining < 0) return false;
  for (int j = 0; j < base_rank; ++j) {
    const int64_t start = base_strides[j] == 0 ? 0 : remaining / base_strides[j];
    remaining -= start * base_strides[j];
    if (start >= std::max<int64_t>(base_shape[j], 1)) return false;
    const int d = view_dim_of[static_cast<size_t>(j)];
    const int64_t extent = d < 0 ? 1 : (view.shape()[d] - 1) * step_of[static_cast<size_t>(j)] + 1;
    if (start + extent > base_shape[j]) return false;
    if (start == 0 && extent == base_shape[j] && (d < 0 || step_of[static_cast<size_t>(j)] == 1)) continue;
    ViewStep s{OpId::slice, {}};
    s.attrs.dim = j;
    s.attrs.start = start;
    s.attrs.end = start + extent;
    s.attrs.step = d < 0 ? 1 : step_of[static_cast<size_t>(j)];
    steps.push_back(s);
  }
  if (remaining != 0) return false;
  // Permute the kept base dims into the view's order; the selected-away (now size-1) dims go last.
  Dims order;
  for (int d = 0; d < rank; ++d) {
    if (base_dim_of[static_cast<size_t>(d)] >= 0) order.push_back(base_dim_of[static_cast<size_t>(d)]);
  }
  const int kept = order.size();
  for (int j = 0; j < base_rank; ++j) {
    if (view_dim_of[static_cast<size_t>(j)] < 0) order.push_back(j);
  }
  // Without a reorder of the kept dims the final reshape alone drops the selected-away dims.
  bool identity = true;
  for (int d = 1; d < kept; ++d) identity = identity && order[d - 1] < order[d];
  if (!identity) steps.push_back({OpId::permute, {}});
  if (!identity) steps.back().attrs.dims = order;
  // Reshape to the view's shape with broadcast dims as 1 (only inserts and drops size-1 dims).
  Dims unexpanded = view.shape();
  bool broadcast = false;
  for (int d = 0; d < rank; ++d) {
    if (view.shape()[d] > 1 && view.strides()[d] == 0) {
      unexpanded[d] = 1;
      broadcast = true;
    }
  }
  steps.push_back({OpId::reshape, {}});
  steps.back().attrs.dims = unexpanded;
  if (broadcast) {
    steps.push_back({OpId::expand, {}});
    steps.back().attrs.dims = view.shape();
  }
  return true;
}

// A finer contiguous shape of the base whose dims line up with the view's strides and extents, so that a
// split followed by a transpose (x.reshape({b, s, h, d}).transpose(1, 2)) maps each view dim to one
// base dim. The base shape itself when the strides do not form a chain of divisors. With
// `keep_base_dims` false the base's own dims are not kept, so that base dims the view walks as one are
// merged: repeat_kv's [b, kv, n_rep, s, d] copy reshaped to [b, kv * n_rep, s, d] and transposed is
// [kv * n_rep, s, d] permuted. (The base is contiguous, so any shape of its size is a reshape of it.)
Dims refined_base_shape(const Dims& base_shape, const Tensor& view, bool keep_base_dims) {
  const int64_t numel = base_shape.product();
  std::vector<int64_t> strides;
  const Dims base_strides = contiguous_strides(base_shape);
  for (int j = 0; keep_base_dims && j < base_shape.size(); ++j) strides.push_back(base_strides[j]);
  for (int d = 0; d < view.dim(); ++d) {
    if (view.shape()[d] <= 1 || view.strides()[d] <= 0) continue;
    strides.push_back(view.strides()[d]);
    strides.push_back(view.strides()[d] * view.shape()[d]);
  }
  strides.push_back(1);
  std::sort(strides.begin(), strides.end(), std::greater<>());
  strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
  Dims refined;
  int64_t outer = numel;
  for (int64_t stride : strides) {
    if (stride >= numel) continue;
    if (stride <= 0 || outer % stride != 0 || refined.size() == kMaxDims) return base_shape;
    refined.push_back(outer / stride);
    outer = stride;
  }
  if (outer != 1) return base_shape;
  return refined;
}

bool rebuild_view(const TensorMeta& base, const Tensor& view, std::vector<ViewStep>& steps) {
  auto matches = [&] {
    Tensor rebuilt = meta_tensor(base);
    for (const ViewStep& s : steps) {
      rebuilt = apply_view_step(rebuilt, s);
      if (!rebuilt.defined()) return false;
    }
    return same_view(rebuilt, view);
  };
  if (view.is_contiguous() && view.offset() == 0 && view.numel() == base.shape.product()) {
    steps = {{OpId::reshape, {}}};
    steps.back().attrs.dims = view.shape();
    return matches();
  }
  // The candidates in turn; each is checked by rebuilding the view from it.
  const Dims refined = refined_base_shape(base.shape, view, true);
  const Dims merged = refined_base_shape(base.shape, view, false);
  for (const Dims& shape : {refined, base.shape, merged}) {
    steps.clear();
    if (!(shape == base.shape)) {
      steps.push_back({OpId::reshape, {}});
      steps.back().attrs.dims = shape;
    }
    if (rebuild_from(shape, view, steps) && matches()) return true;
  }
  return false;
}

int value_of(CaptureContext& ctx, const Tensor& t, std::string_view what) {
  auto it = ctx.value_of_storage.find(t.storage().get());
  SIGHTLINE_CHECK(
      it != ctx.value_of_storage.end(),
      "compile(): {} is a tensor traced by another compile() call; pass tensors into the compiled "
      "function as arguments",
      what);
  const int base = it->second;
  const TensorMeta& base_meta = ctx.graph.nodes[static_cast<size_t>(base)].meta;
  if (t.shape() == base_meta.shape && t.offset() == 0 && t.is_contiguous()) return base;
  const auto key = std::make_tuple(base, t.shape().to_string(), t.strides().to_string(), t.offset());
  if (auto cached = ctx.views.find(key); cached != ctx.views.end()) return cached->second;
  std::vector<ViewStep> steps;
  SIGHTLINE_CHECK(
      rebuild_view(base_meta, t, steps),
      "compile(): cannot capture a view with shape {}, strides {} and offset {} of a value of shape {} "
      "(produced by {}); make the value contiguous (.contiguous()) before taking this view",
      t.shape(), t.strides(), t.offset(), base_meta.shape, producer_name(*t.storage()));
  int value = base;
  for (const ViewStep& s : steps) {
    const bool no_op = (s.op == OpId::reshape || s.op == OpId::expand) &&
                       ctx.graph.nodes[static_cast<size_t>(value)].meta.shape == s.attrs.dims;
    if (!no_op) value = ctx.graph.add(make_op_node(ctx.graph, s.op, {value}, s.attrs));
  }
  ctx.views.emplace(key, value);
  return value;
}

// An op the graph cannot hold: an error with fullgraph, else an eager step between two graphs whose
// outputs are placeholders that later ops read like any value.
void record_break(CaptureContext& ctx, const OpCall& call, Tensor& out, std::vector<int> inputs, int op_index,
                  const std::string& reason) {
  const std::string_view name = op_name(call.op);
  SIGHTLINE_CHECK(!ctx.fullgraph,
                  "compile(): graph break at {} (op {} of the function): {}; without fullgraph the op runs eagerly "
                  "between two compiled graphs",
                  name, op_index, reason);
  const int index = static_cast<int>(ctx.breaks.size());
  EagerStep step;
  step.op = call.op;
  step.attrs = call.attrs;
  step.inputs = std::move(inputs);
  step.info.op = std::string(name);
  step.info.reason = reason;
  step.info.op_index = op_index;
  auto add_placeholder = [&](const Tensor& t) {
    const int id = ctx.graph.add(make_input_node(-1, {t.shape(), t.dtype()}));
    ctx.value_of_storage[t.storage().get()] = id;
    ctx.keep_alive.push_back(t.storage());
    ctx.break_of_node[id] = index;
    step.outputs.push_back(id);
  };
  add_placeholder(out);
  for (const Tensor& t : call.more_outputs) add_placeholder(t);
  ctx.breaks.push_back(std::move(step));
}

void record_kernel(const OpCall& call, Tensor& out) {
  CaptureContext& ctx = current_context(call.op);
  const int op_index = ctx.ops_recorded++;
  ctx.flops += op_cost(call, out).flops;
  std::vector<int> inputs;
  for (size_t k = 0; k < call.inputs.size(); ++k) {
    const Tensor& t = call.inputs[k];
    inputs.push_back(t.defined() ? value_of(ctx, t, fmt::format("input {} of {}", k, op_name(call.op)))
                                 : kNoValue);
  }
  const OpInfo& info = op_info(call.op);
  if (info.outputs > 1) {
    record_break(ctx, call, out, std::move(inputs), op_index,
                 fmt::format("{} returns {} tensors and a graph node has one output", info.name, info.outputs));
    return;
  }
  Node n;
  n.op = call.op;
  n.inputs = std::move(inputs);
  n.attrs = call.attrs;
  if (call.op == OpId::fill) n.attrs.device = ctx.target;  // constants are made where the graph runs
  n.meta = {out.shape(), out.dtype()};
  const int id = ctx.graph.add(std::move(n));
  ctx.value_of_storage[out.storage().get()] = id;
  ctx.keep_alive.push_back(out.storage());
}

class CaptureBackend final : public Backend {
 public:
  CaptureBackend() : Backend("capture") {
    for (const OpInfo& info : kOpTable) {
      if (!info.is_view && info.id != OpId::copy) kernels[static_cast<size_t>(info.id)] = &record_kernel;
    }
  }

  std::shared_ptr<Storage> allocate(Device device, size_t nbytes) override {
    return std::make_shared<Storage>(device, nbytes, nullptr, nullptr, nullptr);
  }

  void copy_from_host(const Storage&, size_t, const void*, size_t) override {
    fail(
        "inside compile(): copying host data into a traced tensor (a tensor made from host values by randn, "
        "rand, arange, from_vector or .to(device)) cannot be captured; create it outside the compiled "
        "function and pass it as an argument");
  }

  void copy_to_host(void*, const Storage& src, size_t, size_t) override {
    fail(
        "inside compile(): reading the value of the tensor produced by {} on the host (item(), to_string(), "
        ".to(cpu), branching on data) cannot be captured; {}",
        producer_name(src), kMoveOutHint);
  }
};

uint8_t capture_backend_id() {
  static const uint8_t id = register_backend(std::make_unique<CaptureBackend>());
  return id;
}

// Installs a context for the current thread and restores the previous one (a compiled function called
// inside another one's capture) on exit.
class ContextScope {
 public:
  explicit ContextScope(CaptureContext& ctx) : previous_(t_capture) { t_capture = &ctx; }
  ~ContextScope() { t_capture = previous_; }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  CaptureContext* previous_;
};

std::string explain(const std::string& message) {
  const bool device_mismatch =
      message.find("capture") != std::string::npos && message.find("different devices") != std::string::npos;
  if (!device_mismatch) return fmt::format("compile(): capturing the function failed: {}", message);
  return fmt::format(
      "compile(): capturing the function failed: {}; tensors a compiled function uses must be "
      "its arguments (tensors captured from the enclosing scope are not traced)",
      message);
}

// Cuts the recorded function at its breaks: the op nodes between two breaks form one graph, whose
// inputs are the values it reads from before it (arguments, earlier graphs, eager ops) and whose outputs
// are the values read after it (or returned). A graph none of whose values is read is left out.
CapturedFunction split_at_breaks(CaptureContext& ctx) {
  const Graph& g = ctx.graph;
  const int n = static_cast<int>(g.nodes.size());
  CapturedFunction r;
  r.has_breaks = true;
  r.value_count = n;
  r.outputs = g.outputs;
  std::vector<int> step_of(static_cast<size_t>(n), -1);  // position in r.order; -1 for an argument
  std::vector<std::vector<int>> members;                 // each graph's op nodes
  int open = -1;                                         // the graph being filled
  for (int v = 0; v < n; ++v) {
    const Node& node = g.nodes[static_cast<size_t>(v)];
    if (auto b = ctx.break_of_node.find(v); b != ctx.break_of_node.end()) {
      const EagerStep& step = ctx.breaks[static_cast<size_t>(b->second)];
      if (step.outputs.front() == v) {
        open = -1;
        r.eager.push_back(step);
        r.order.push_back({true, static_cast<int>(r.eager.size()) - 1});
      }
      step_of[static_cast<size_t>(v)] = static_cast<int>(r.order.size()) - 1;
      continue;
    }
    if (node.kind == NodeKind::input) {
      r.arguments.push_back(v);
      continue;
    }
    if (open < 0) {
      members.emplace_back();
      open = static_cast<int>(members.size()) - 1;
      r.order.push_back({false, open});
    }
    members[static_cast<size_t>(open)].push_back(v);
    step_of[static_cast<size_t>(v)] = static_cast<int>(r.order.size()) - 1;
  }
  // The values read outside the step that makes them.
  std::vector<char> needed(static_cast<size_t>(n), 0);
  for (int v : g.outputs) needed[static_cast<size_t>(v)] = 1;
  for (const EagerStep& e : r.eager) {
    for (int u : e.inputs) {
      if (u != kNoValue) needed[static_cast<size_t>(u)] = 1;
    }
  }
  for (int v = 0; v < n; ++v) {
    for (int u : g.nodes[static_cast<size_t>(v)].inputs) {
      if (u != kNoValue && step_of[static_cast<size_t>(u)] != step_of[static_cast<size_t>(v)]) {
        needed[static_cast<size_t>(u)] = 1;
      }
    }
  }
  std::vector<std::pair<bool, int>> order;
  for (const auto& [is_eager, index] : r.order) {
    if (is_eager) {
      r.eager[static_cast<size_t>(index)].info.graph = static_cast<int>(r.graphs.size());
      order.push_back({true, index});
      continue;
    }
    const std::vector<int>& nodes = members[static_cast<size_t>(index)];
    const int position = step_of[static_cast<size_t>(nodes.front())];
    GraphStep step;
    std::vector<int> external;
    for (int v : nodes) {
      for (int u : g.nodes[static_cast<size_t>(v)].inputs) {
        if (u != kNoValue && step_of[static_cast<size_t>(u)] != position) external.push_back(u);
      }
      if (needed[static_cast<size_t>(v)]) step.outputs.push_back(v);
    }
    if (step.outputs.empty()) continue;  // nothing it computes is read
    std::sort(external.begin(), external.end());
    external.erase(std::unique(external.begin(), external.end()), external.end());
    std::unordered_map<int, int> local;
    for (size_t i = 0; i < external.size(); ++i) {
      local[external[i]] =
          step.graph.add(make_input_node(static_cast<int>(i), g.nodes[static_cast<size_t>(external[i])].meta));
    }
    for (int v : nodes) {
      Node copy = g.nodes[static_cast<size_t>(v)];
      for (int& u : copy.inputs) {
        if (u != kNoValue) u = local.at(u);
      }
      local[v] = step.graph.add(std::move(copy));
      r.op_count += 1;
    }
    for (int v : step.outputs) step.graph.outputs.push_back(local.at(v));
    step.inputs = std::move(external);
    order.push_back({false, static_cast<int>(r.graphs.size())});
    r.graphs.push_back(std::move(step));
  }
  r.order = std::move(order);
  return r;
}

}  // namespace

Device capture_device() { return Device{capture_backend_id(), 0}; }

CapturedFunction capture_function(const TensorListFunction& fn, std::span<const TensorMeta> inputs, Device target,
                                  bool fullgraph) {
  const Device device = capture_device();
  CaptureContext ctx;
  ctx.target = target;
  ctx.fullgraph = fullgraph;
  std::vector<Tensor> proxies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor proxy = empty(inputs[i].shape, TensorOptions(inputs[i].dtype, device));
    const int id = ctx.graph.add(make_input_node(static_cast<int>(i), inputs[i]));
    ctx.value_of_storage[proxy.storage().get()] = id;
    ctx.keep_alive.push_back(proxy.storage());
    proxies.push_back(std::move(proxy));
  }
  ContextScope scope(ctx);
  std::vector<Tensor> results;
  try {
    results = fn(proxies);
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.rfind("compile()", 0) == 0 || message.rfind("inside compile()", 0) == 0) throw;
    throw Error(explain(message));
  }
  SIGHTLINE_CHECK(!results.empty(), "compile(): the function returned no tensors; return at least one");
  for (size_t k = 0; k < results.size(); ++k) {
    const Tensor& r = results[k];
    SIGHTLINE_CHECK(r.defined(), "compile(): output {} of the function is an undefined tensor", k);
    SIGHTLINE_CHECK(r.device() == device,
                    "compile(): output {} ({}) is not computed from the function's arguments; return only "
                    "tensors computed inside the function",
                    k, r.describe());
    ctx.graph.outputs.push_back(value_of(ctx, r, fmt::format("output {}", k)));
  }
  if (ctx.breaks.empty()) {
    CapturedFunction whole;
    whole.graph = std::move(ctx.graph);
    for (const Node& n : whole.graph.nodes) whole.op_count += n.kind == NodeKind::op ? 1 : 0;
    whole.flops = ctx.flops;
    return whole;
  }
  CapturedFunction split = split_at_breaks(ctx);
  split.flops = ctx.flops;
  return split;
}

Graph capture_graph(const TensorListFunction& fn, std::span<const TensorMeta> inputs, Device target) {
  return capture_function(fn, inputs, target, true).graph;
}

}  // namespace sightline::compiler

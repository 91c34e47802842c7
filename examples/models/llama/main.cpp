// Llama as HuggingFace's LlamaModel computes a forward pass (eager attention), on a simulated NeuronCore,
// profiled eager, with fused attention (sdpa) and compiled, side by side.
//
// The reference is transformers' modeling_llama.py (LlamaModel, LlamaRotaryEmbedding, LlamaDecoderLayer,
// LlamaAttention, eager_attention_forward, repeat_kv, LlamaMLP, LlamaRMSNorm; docs/models.md lists its op
// sequence beside this one):
//
//   embeddings   embed_tokens(ids)
//   rotary       cos, sin of (inv_freq @ position_ids), recomputed every forward pass as HF does
//   mask         causal: finfo(dtype).min above the diagonal, 0 elsewhere
//   layer x N    x + o_proj(attn(RMSNorm(x)))  with rotary on q and k, k and v repeated for grouped-query
//                attention (repeat_kv), softmax(q k^T * head_dim^-0.5 + mask) in f32, times v;
//                then  h + down_proj(silu(gate_proj(RMSNorm(h))) * up_proj(RMSNorm(h)))
//   final        norm (RMSNorm)
//
// Configs: `tiny` (2 layers, hidden 256, 4 heads, 2 kv heads) for tests and quick runs, `small`, and
// `llama3_8b` (meta-llama/Meta-Llama-3-8B: 32 layers, 4096, 32 heads, 8 kv heads, 14336, vocab 128256,
// rope_theta 500000 with the llama3 frequency scaling), sensible with --timing-only --dtype bf16. Its 15 GB
// of bf16 weights do not fit one simulated core's 12 GiB of HBM, so a timing-only run whose weights do not
// fit gives every layer the same weight tensors (it says so): no value is read, and each layer's
// executions still read their weights from HBM, so the modeled times are those of distinct weights.
//
//   llama --config tiny
//   llama --config llama3_8b --timing-only --dtype bf16 --tokens 128
#include <cmath>
#include <limits>
#include <map>
#include <numbers>

#include "../common/harness.h"
#include "sightline/parallel.h"

using namespace sightline;
using models::Parameter;

namespace {

struct LlamaConfig {
  int64_t layers, hidden, heads, kv_heads, intermediate, vocab;
  double rope_theta = 10000.0;
  bool llama3_rope_scaling = false;  // rope_scaling {"rope_type": "llama3", factor 8, low 1, high 4, 8192}
  double rms_norm_eps = 1e-5;
};

const std::map<std::string, LlamaConfig>& llama_configs() {
  static const std::map<std::string, LlamaConfig> configs = {
      {"tiny", {2, 256, 4, 2, 768, 1024}},
      {"small", {4, 1024, 16, 4, 2816, 32000}},
      {"llama3_8b", {32, 4096, 32, 8, 14336, 128256, 500000.0, true}},
  };
  return configs;
}

constexpr size_t kParamsPerLayer = 9;

// Parameters of a LlamaModel, in the order its forward pass reads them, by their HF names. With
// `shared_layers` only layer 0's are listed and every layer reads them.
std::vector<Parameter> llama_parameters(const LlamaConfig& c, bool shared_layers) {
  using Init = Parameter::Init;
  const int64_t dh = c.hidden / c.heads;
  std::vector<Parameter> p;
  p.push_back({"embed_tokens.weight", {c.vocab, c.hidden}});
  for (int64_t l = 0; l < (shared_layers ? 1 : c.layers); ++l) {
    const std::string at = fmt::format("layers.{}.", l);
    p.push_back({at + "input_layernorm.weight", {c.hidden}, Init::ones});
    p.push_back({at + "self_attn.q_proj.weight", {c.heads * dh, c.hidden}});
    p.push_back({at + "self_attn.k_proj.weight", {c.kv_heads * dh, c.hidden}});
    p.push_back({at + "self_attn.v_proj.weight", {c.kv_heads * dh, c.hidden}});
    p.push_back({at + "self_attn.o_proj.weight", {c.hidden, c.heads * dh}});
    p.push_back({at + "post_attention_layernorm.weight", {c.hidden}, Init::ones});
    p.push_back({at + "mlp.gate_proj.weight", {c.intermediate, c.hidden}});
    p.push_back({at + "mlp.up_proj.weight", {c.intermediate, c.hidden}});
    p.push_back({at + "mlp.down_proj.weight", {c.hidden, c.intermediate}});
  }
  p.push_back({"norm.weight", {c.hidden}, Init::ones});
  return p;
}

// LlamaRotaryEmbedding's inv_freq buffer (computed at init): 1 / theta^(2i / dh), then, for Llama 3,
// _compute_llama3_parameters' frequency scaling.
std::vector<float> llama_inv_freq(const LlamaConfig& c) {
  const int64_t dh = c.hidden / c.heads;
  std::vector<float> out;
  for (int64_t i = 0; i < dh; i += 2) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / static_cast<double>(dh));
    if (c.llama3_rope_scaling) {
      constexpr double factor = 8, low = 1, high = 4, old_context = 8192;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > old_context / low) {
        f = f / factor;
      } else if (wavelen >= old_context / high) {
        const double smooth = (old_context / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

double finfo_min(DType dtype) {
  return dtype == DType::bf16 ? -3.3895313892515355e38 : static_cast<double>(std::numeric_limits<float>::lowest());
}

// LlamaRMSNorm: in f32, then weight * x.to(input dtype).
Tensor llama_rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const DType input_dtype = x.dtype();
  const Tensor h = x.to(DType::f32);
  const Tensor variance = mean(pow(h, 2.0), {-1}, true);
  return weight * (h * rsqrt(variance + eps)).to(input_dtype);
}

// rotate_half as modeling_llama.py writes it: slices, not chunk.
Tensor rotate_half(const Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return cat({-x.slice(-1, half, x.size(-1)), x.slice(-1, 0, half)}, -1);
}

// repeat_kv: [B, KV, S, dh] -> [B, KV * n_rep, S, dh] (expand, then a reshape that copies); any [B, KV, m, n].
Tensor repeat_kv(const Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  const int64_t b = x.size(0), kv = x.size(1), s = x.size(2), dh = x.size(3);
  return x.unsqueeze(2).expand({b, kv, n_rep, s, dh}).reshape({b, kv * n_rep, s, dh});
}

// The attention functions take k and v as the projections give them, [B, kv_heads, S, dh].
//
// eager_attention_forward: repeat_kv, matmul with the transposed keys, softmax in f32 (softmax(...,
// dtype=torch.float32)), back to the query's dtype.
Tensor attention_eager(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scaling,
                       int64_t n_rep) {
  const Tensor k_t = repeat_kv(k, n_rep).transpose(2, 3);
  const Tensor v_r = repeat_kv(v, n_rep);
  const Tensor weights = matmul(q, k_t) * scaling + mask;
  return matmul(softmax(weights.to(DType::f32), -1).to(q.dtype()), v_r);
}
// sdpa_attention_forward: repeat_kv of k and v, then F.scaled_dot_product_attention(q, k, v, attn_mask=None,
// scale=scaling, is_causal=True) (without a padding mask, _update_causal_mask leaves the mask to is_causal):
// the fused built-in, one execution where eager has four, and no mask tensor.
Tensor attention_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& /*mask*/, double scaling,
                      int64_t n_rep) {
  const Tensor k_r = repeat_kv(k, n_rep), v_r = repeat_kv(v, n_rep);
  return scaled_dot_product_attention(q, k_r, v_r, {}, /*is_causal=*/true, scaling);
}
using AttentionFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, int64_t);

// What every layer reads besides its weights: the causal mask and the rotary cos / sin.
struct LlamaPrologue {
  Tensor x, mask, cos_t, sin_t;
};

// Embeddings, the causal mask (when `build_mask`) and the rotary embedding. a = {input_ids i32 [B, S],
// position_ids i32 [B, S], cache_position i32 [S], inv_freq f32 [dh / 2], embed_tokens.weight}.
LlamaPrologue llama_prologue(const Tensor* a, DType dtype, bool build_mask) {
  const Tensor &ids = a[0], &position_ids = a[1], &cache_position = a[2], &inv_freq = a[3];
  const int64_t b = ids.size(0), s = ids.size(1);
  LlamaPrologue out;
  out.x = embedding(a[4], ids);
  // The causal mask of the eager path (create_causal_mask / _update_causal_mask): min where key > query.
  // The sdpa path builds none: is_causal masks inside the fused op.
  if (build_mask) {
    const Tensor causal =
        gt(cache_position.reshape({1, s}), cache_position.reshape({s, 1})).to(dtype) * finfo_min(dtype);
    out.mask = causal.reshape({1, 1, s, s});
  }
  // LlamaRotaryEmbedding.forward, every forward pass (attention_scaling is 1 for the default and llama3 rope).
  const int64_t half = inv_freq.size(0);
  const Tensor inv_freq_expanded = inv_freq.reshape({1, half, 1}).expand({b, half, 1});
  const Tensor position_ids_expanded = position_ids.reshape({b, 1, s}).to(DType::f32);
  const Tensor freqs = matmul(inv_freq_expanded, position_ids_expanded).transpose(1, 2);
  const Tensor emb = cat({freqs, freqs}, -1);
  out.cos_t = (cos(emb) * 1.0).to(dtype).unsqueeze(1);  // apply_rotary_pos_emb's unsqueeze(1)
  out.sin_t = (sin(emb) * 1.0).to(dtype).unsqueeze(1);
  return out;
}

// o_proj(attn(RMSNorm(x))) of one layer, p = its parameters. Under tensor parallelism p holds this rank's
// heads (q, k, v sharded by rows, o_proj by columns), and the result is this rank's partial sum.
Tensor llama_attention_block(const Tensor& x, const Tensor* p, const LlamaPrologue& pre, const LlamaConfig& c,
                             int64_t n_rep, AttentionFn attention) {
  const int64_t b = x.size(0), s = x.size(1), dh = c.hidden / c.heads;
  const double scaling = std::pow(static_cast<double>(dh), -0.5);
  const Tensor h = llama_rms_norm(x, p[0], c.rms_norm_eps);
  Tensor q = linear(h, p[1]).view({b, s, -1, dh}).transpose(1, 2);
  Tensor k = linear(h, p[2]).view({b, s, -1, dh}).transpose(1, 2);
  const Tensor v = linear(h, p[3]).view({b, s, -1, dh}).transpose(1, 2);
  q = q * pre.cos_t + rotate_half(q) * pre.sin_t;
  k = k * pre.cos_t + rotate_half(k) * pre.sin_t;
  const Tensor out = attention(q, k, v, pre.mask, scaling, n_rep)
                         .transpose(1, 2)
                         .contiguous()
                         .reshape({b, s, -1});
  return linear(out, p[4]);
}

// down_proj(silu(gate_proj(RMSNorm(x))) * up_proj(RMSNorm(x))); under tensor parallelism gate and up are
// sharded by rows, down by columns, and the result is this rank's partial sum.
Tensor llama_mlp_block(const Tensor& x, const Tensor* p, const LlamaConfig& c) {
  const Tensor h2 = llama_rms_norm(x, p[5], c.rms_norm_eps);
  return linear(silu(linear(h2, p[6])) * linear(h2, p[7]), p[8]);
}

// The forward pass. a = {input_ids i32 [B, S], position_ids i32 [B, S], cache_position i32 [S], inv_freq f32
// [dh / 2], then the parameters in llama_parameters' order}. Returns last_hidden_state [B, S, hidden].
std::vector<Tensor> llama_forward(const std::vector<Tensor>& a, const LlamaConfig& c, DType dtype, bool shared_layers,
                                  AttentionFn attention) {
  const Tensor* w = a.data() + 4;
  LlamaPrologue pre = llama_prologue(a.data(), dtype, attention != &attention_sdpa);
  Tensor x = pre.x;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Tensor* p = w + 1 + (shared_layers ? 0 : l) * static_cast<int64_t>(kParamsPerLayer);
    const Tensor residual = x;
    x = residual + llama_attention_block(x, p, pre, c, c.heads / c.kv_heads, attention);
    x = x + llama_mlp_block(x, p, c);
  }
  const Tensor* norm = w + 1 + (shared_layers ? 1 : c.layers) * static_cast<int64_t>(kParamsPerLayer);
  return {llama_rms_norm(x, norm[0], c.rms_norm_eps)};
}

// Tensor parallelism over `tp` cores, as NeuronX Distributed shards Llama: q, k, v, gate and up are
// column-parallel (each rank its heads and its slice of the intermediate features), o_proj and down are
// row-parallel (their partial sums all-reduced), embeddings and norms replicated. With fewer kv heads than
// ranks each kv head is replicated on tp / kv_heads ranks, as NxD does.
struct LlamaTensorParallel {
  int tp = 1;
  std::vector<Device> devices;
  std::vector<std::vector<Tensor>> args;  // per rank: the inputs, then this rank's parameters
  int64_t n_rep = 1;                      // query heads per kv head on one rank
};

void check_tp(const LlamaConfig& c, int tp, const std::string& config) {
  SIGHTLINE_CHECK(c.heads % tp == 0 && c.intermediate % tp == 0 && (c.kv_heads % tp == 0 || tp % c.kv_heads == 0),
                  "llama {}: --tp {} does not divide its {} heads, {} kv heads and {} intermediate features; use a tp "
                  "that divides the heads (kv heads are replicated when tp exceeds them)",
                  config, tp, c.heads, c.kv_heads, c.intermediate);
}

// Rank r's slice of one parameter (HF shapes [out, in]); `full` is on the cpu, or undefined for a timing-only
// run (which allocates the shard unwritten on the rank's core).
Tensor rank_parameter(const Tensor& full, const Dims& shape, int64_t dim, int64_t begin, int64_t size, DType dtype,
                      Device device) {
  if (!full.defined()) {
    Dims s = shape;
    if (dim >= 0) s[static_cast<size_t>(dim)] = size;
    return empty(s, {dtype, device});
  }
  if (dim < 0) return full.to(device);
  return full.slice(static_cast<int>(dim), begin, begin + size).contiguous().to(device);
}

LlamaTensorParallel llama_shard(const LlamaConfig& c, int tp, const std::vector<Parameter>& params,
                                const std::vector<Tensor>& cpu_weights, const std::vector<Tensor>& cpu_inputs,
                                DType dtype) {
  LlamaTensorParallel out;
  out.tp = tp;
  out.devices = parallel::devices(tp);
  const int64_t dh = c.hidden / c.heads;
  const int64_t kv_local = std::max<int64_t>(1, c.kv_heads / tp);
  out.n_rep = (c.heads / tp) / kv_local;
  for (int r = 0; r < tp; ++r) {
    const Device device = out.devices[static_cast<size_t>(r)];
    std::vector<Tensor> a;
    for (const Tensor& in : cpu_inputs) a.push_back(in.to(device));
    const int64_t kv_first = c.kv_heads >= tp ? r * kv_local : r * c.kv_heads / tp;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor full = cpu_weights.empty() ? Tensor() : cpu_weights[i];
      const Dims& shape = params[i].shape;
      const bool layer = i >= 1 && i + 1 < params.size();
      const size_t slot = layer ? (i - 1) % kParamsPerLayer : 0;
      int64_t dim = -1, begin = 0, size = 0;
      if (layer && (slot == 1 || slot == 6 || slot == 7)) {  // q, gate, up: rows
        dim = 0, size = shape[0] / tp, begin = r * size;
      } else if (layer && (slot == 2 || slot == 3)) {  // k, v: this rank's kv heads
        dim = 0, size = kv_local * dh, begin = kv_first * dh;
      } else if (layer && (slot == 4 || slot == 8)) {  // o_proj, down: columns
        dim = 1, size = shape[1] / tp, begin = r * size;
      }
      a.push_back(rank_parameter(full, shape, dim, begin, size, dtype, device));
    }
    out.args.push_back(std::move(a));
  }
  return out;
}

// One forward pass on every rank: the same ops as llama_forward on each rank's shards, with an all-reduce
// after each row-parallel projection. Each stage between two collectives is a function of tensors, run
// eager or compiled (compile() captures no collective, so a compiled tensor-parallel model is one
// executable per stage and rank; a residual add moves into the stage after its all-reduce).
struct LlamaStages {
  models::ModelFn prologue;         // {ids, positions, cache, inv_freq, embed} -> {x, mask, cos, sin}
  models::ModelFn first_attention;  // {x, mask, cos, sin, p0..p4} -> {x, partial o_proj}
  models::ModelFn attention;        // {x, sum, mask, cos, sin, p0..p4} -> {x + sum, partial o_proj}
  models::ModelFn mlp;              // {x, sum, p5..p8} -> {x + sum, partial down_proj}
  models::ModelFn final_norm;       // {x, sum, norm} -> {RMSNorm(x + sum)}
};

LlamaStages llama_stages(const LlamaConfig& c, DType dtype, int64_t n_rep, AttentionFn attention) {
  LlamaStages s;
  s.prologue = [dtype](const std::vector<Tensor>& a) {
    // The stages pass the mask between them as a tensor, so it is built on the sdpa path too (unread).
    const LlamaPrologue pre = llama_prologue(a.data(), dtype, /*build_mask=*/true);
    return std::vector<Tensor>{pre.x, pre.mask, pre.cos_t, pre.sin_t};
  };
  auto attention_of = [&c, n_rep, attention](const Tensor& x, const Tensor* rest) {
    const LlamaPrologue pre{x, rest[0], rest[1], rest[2]};
    std::vector<Tensor> p(rest + 3, rest + 8);
    p.resize(kParamsPerLayer);
    return std::vector<Tensor>{x, llama_attention_block(x, p.data(), pre, c, n_rep, attention)};
  };
  s.first_attention = [attention_of](const std::vector<Tensor>& a) { return attention_of(a[0], a.data() + 1); };
  s.attention = [attention_of](const std::vector<Tensor>& a) { return attention_of(a[0] + a[1], a.data() + 2); };
  s.mlp = [&c](const std::vector<Tensor>& a) {
    const Tensor x = a[0] + a[1];
    std::vector<Tensor> p(kParamsPerLayer);
    for (size_t i = 5; i < kParamsPerLayer; ++i) p[i] = a[2 + i - 5];
    return std::vector<Tensor>{x, llama_mlp_block(x, p.data(), c)};
  };
  s.final_norm = [&c](const std::vector<Tensor>& a) {
    return std::vector<Tensor>{llama_rms_norm(a[0] + a[1], a[2], c.rms_norm_eps)};
  };
  return s;
}

// The stages compiled: compile() keys its programs by the inputs' devices, so each rank gets its own.
LlamaStages compiled_stages(const LlamaStages& eager) {
  auto wrap = [](const models::ModelFn& fn) {
    auto compiled = std::make_shared<CompiledFunction>(compile(fn));
    return models::ModelFn([compiled](const std::vector<Tensor>& a) { return (*compiled)(a); });
  };
  return {wrap(eager.prologue), wrap(eager.first_attention), wrap(eager.attention), wrap(eager.mlp),
          wrap(eager.final_norm)};
}

std::vector<Tensor> llama_forward_tp(const LlamaTensorParallel& tp, const LlamaConfig& c, bool shared_layers,
                                     const LlamaStages& stages) {
  const auto ranks = static_cast<size_t>(tp.tp);
  std::vector<Tensor> x(ranks), mask(ranks), cos_t(ranks), sin_t(ranks), partial(ranks), sums;
  for (size_t r = 0; r < ranks; ++r) {
    const std::vector<Tensor>& a = tp.args[r];
    const std::vector<Tensor> pre = stages.prologue({a[0], a[1], a[2], a[3], a[4]});
    x[r] = pre[0], mask[r] = pre[1], cos_t[r] = pre[2], sin_t[r] = pre[3];
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const size_t base = 5 + static_cast<size_t>((shared_layers ? 0 : l) * static_cast<int64_t>(kParamsPerLayer));
    for (size_t r = 0; r < ranks; ++r) {
      const std::vector<Tensor>& a = tp.args[r];
      std::vector<Tensor> in = {x[r]};
      if (!sums.empty()) in.push_back(sums[r]);
      for (const Tensor& t : {mask[r], cos_t[r], sin_t[r]}) in.push_back(t);
      for (size_t i = 0; i < 5; ++i) in.push_back(a[base + i]);
      const std::vector<Tensor> out = sums.empty() ? stages.first_attention(in) : stages.attention(in);
      x[r] = out[0], partial[r] = out[1];
    }
    sums = neuron::all_reduce(partial);
    for (size_t r = 0; r < ranks; ++r) {
      std::vector<Tensor> in = {x[r], sums[r]};
      for (size_t i = 5; i < kParamsPerLayer; ++i) in.push_back(tp.args[r][base + i]);
      const std::vector<Tensor> out = stages.mlp(in);
      x[r] = out[0], partial[r] = out[1];
    }
    sums = neuron::all_reduce(partial);
  }
  const size_t norm = 5 + static_cast<size_t>((shared_layers ? 1 : c.layers) * static_cast<int64_t>(kParamsPerLayer));
  std::vector<Tensor> outs;
  for (size_t r = 0; r < ranks; ++r) outs.push_back(stages.final_norm({x[r], sums[r], tp.args[r][norm]})[0]);
  return outs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Llama (HF LlamaModel) on a simulated NeuronCore: eager, sdpa and compiled, profiled"};
  models::RunOptions o;
  o.config = "tiny";
  std::vector<std::string> names;
  for (const auto& [name, config] : llama_configs()) names.push_back(name);
  models::add_run_flags(app, o, names);
  int tp = 1;
  app.add_option("--tp", tp,
                 "tensor parallelism: shard the model over this many NeuronCores of the device (Megatron/NxD style: "
                 "column-parallel q/k/v/gate/up, row-parallel o_proj/down with an all-reduce after each)")
      ->check(CLI::PositiveNumber);
  int chips = 1;
  app.add_option("--chips", chips,
                 "chips of the instance to run on, their cores numbered chip by chip: --tp over more cores than one "
                 "chip has needs more, and its collectives then cross the chip-to-chip links")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (o.out_dir.empty()) o.out_dir = "profiles/llama_" + o.config;

  try {
    const LlamaConfig& c = llama_configs().at(o.config);
    neuron::Options options;
    options.spec = o.spec;
    options.functional = !o.timing_only;
    options.chips = chips;
    neuron::configure(options);
    const int64_t wall_start = host_clock::wall_now_ns();
    const Device device = Device::parse(o.device);
    const DType dtype = dtype_parse(o.dtype);
    SIGHTLINE_CHECK(!(o.check_cpu && o.timing_only), "--check-cpu compares values: it needs a functional run");

    const std::vector<Parameter> all = llama_parameters(c, false);
    const double bytes = static_cast<double>(models::parameter_count(all)) * static_cast<double>(dtype_size(dtype));
    // Leave a quarter of HBM to the activations.
    const double hbm = device.is_cpu() ? 1e300 : static_cast<double>(neuron::device_info().hbm_bytes_per_core);
    // Under tensor parallelism a core holds its shard of the layers and the replicated embeddings.
    const double embed_bytes = static_cast<double>(c.vocab * c.hidden) * static_cast<double>(dtype_size(dtype));
    const double per_core = tp > 1 ? embed_bytes + (bytes - embed_bytes) / tp : bytes;
    const bool shared_layers = per_core > 0.75 * hbm;
    SIGHTLINE_CHECK(!shared_layers || (o.timing_only && o.weights.empty()),
                    "llama {}: {:.1f} GB of {} weights do not fit the {:.1f} GB of HBM of one simulated core; run it with "
                    "--timing-only (its layers then share one layer's weights) or with --dtype bf16",
                    o.config, bytes / 1e9, dtype_name(dtype), hbm / 1e9);
    const std::vector<Parameter> params = llama_parameters(c, shared_layers);
    if (tp > 1) {
      SIGHTLINE_CHECK(!device.is_cpu(), "--tp {} shards the model over neuron cores: drop --device cpu", tp);
      check_tp(c, tp, o.config);
      const int cores = neuron::device_info().cores, per_chip = cores / chips;
      SIGHTLINE_CHECK(tp <= cores, "--tp {} needs {} NeuronCores, but {} chip(s) of {} cores have {}; add --chips {}", tp,
                      tp, chips, per_chip, cores, (tp + per_chip - 1) / per_chip);
      o.capture_cores = fmt::format("0-{}", tp - 1);
    }
    std::string source;
    // Under tensor parallelism the full parameters stay on the cpu and each rank receives its shards (a
    // timing-only run allocates the shards unwritten).
    const bool unwritten_shards = tp > 1 && o.timing_only && o.weights.empty();
    const std::vector<Tensor> weights =
        unwritten_shards ? std::vector<Tensor>{}
                         : models::load_parameters(params, o, tp > 1 ? Device::cpu() : device, dtype, "model.", source);
    if (unwritten_shards) source = "weights left unwritten (--timing-only computes no values)";

    std::vector<int32_t> ids, positions, cache;
    Generator gen(7);
    for (int64_t i = 0; i < o.batch; ++i) {
      for (int64_t j = 0; j < o.tokens; ++j) {
        ids.push_back(static_cast<int32_t>(gen.next_u64() % static_cast<uint64_t>(c.vocab)));
        positions.push_back(static_cast<int32_t>(j));
      }
    }
    for (int64_t j = 0; j < o.tokens; ++j) cache.push_back(static_cast<int32_t>(j));
    const std::vector<float> inv_freq = llama_inv_freq(c);
    std::vector<Tensor> args, cpu_inputs;
    LlamaTensorParallel sharded;
    if (tp > 1) {
      cpu_inputs = {from_vector(ids, {o.batch, o.tokens}), from_vector(positions, {o.batch, o.tokens}),
                    from_vector(cache, {o.tokens}), from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())})};
      sharded = llama_shard(c, tp, params, weights, cpu_inputs, dtype);
    } else {
      args = {from_vector(ids, {o.batch, o.tokens}).to(device), from_vector(positions, {o.batch, o.tokens}).to(device),
              from_vector(cache, {o.tokens}).to(device),
              from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())}).to(device)};
      args.insert(args.end(), weights.begin(), weights.end());
    }

    fmt::print("Llama {}: {} layers, hidden {}, {} heads ({} kv heads), intermediate {}, vocab {}, {} parameters ({}); "
               "batch {} x {} tokens on {} ({}{}); profiles go to {}/\n",
               o.config, c.layers, c.hidden, c.heads, c.kv_heads, c.intermediate, c.vocab,
               models::parameter_text(models::parameter_count(all)), dtype_name(dtype), o.batch, o.tokens,
               tp > 1 ? fmt::format("neuron:0-{}, tensor parallel over {} cores{}", tp - 1, tp,
                                    chips > 1 ? fmt::format(" of {} chips", chips) : "")
                      : device.to_string(),
               device.is_cpu() ? "reference backend" : neuron::device_info().spec_name, o.timing_only ? ", timing only" : "",
               o.out_dir);
    fmt::print("{}\n", source);
    if (!o.save_weights.empty()) models::save_parameters(params, weights, "model.", o);
    if (shared_layers) {
      fmt::print("the {:.1f} GB of weights do not fit one core's HBM: every layer reads layer 0's weight tensors "
                 "(timing only: the same executions and HBM traffic as distinct weights)\n",
                 bytes / 1e9);
    }

    auto forward_with = [&c, dtype, shared_layers](AttentionFn attention) -> models::ModelFn {
      return [&c, dtype, shared_layers, attention](const std::vector<Tensor>& a) {
        return llama_forward(a, c, dtype, shared_layers, attention);
      };
    };
    const models::ModelFn eager = forward_with(attention_eager);
    const CompiledFunction compiled = compile(eager);
    std::vector<models::VariantResult> results;
    for (const std::string& v : o.variants()) {
      models::ModelFn fn = eager;
      if (v == "sdpa") fn = forward_with(attention_sdpa);
      if (v == "compiled") fn = [&compiled](const std::vector<Tensor>& a) { return compiled(a); };
      if (tp > 1) {
        const LlamaStages stages = llama_stages(c, dtype, sharded.n_rep, v == "sdpa" ? attention_sdpa : attention_eager);
        const LlamaStages run = v == "compiled" ? compiled_stages(stages) : stages;
        fn = [&sharded, &c, shared_layers, run](const std::vector<Tensor>&) {
          return llama_forward_tp(sharded, c, shared_layers, run);
        };
      }
      results.push_back(models::profile_variant(v, fn, args, o, device));
    }
    if (!device.is_cpu()) models::print_comparison(results, o);
    if (!device.is_cpu() && tp == 1) {
      // Shared layers: every layer reads layer 0's weights, which the arguments hold once.
      double layer_bytes = 0;
      for (size_t i = 1; i <= kParamsPerLayer; ++i) layer_bytes += static_cast<double>(args[4 + i].nbytes());
      const double shared = shared_layers ? layer_bytes * static_cast<double>(c.layers - 1) : 0;
      models::print_floor(results, eager, args, dtype, shared + models::embedding_correction(args[4], args[0]));
    }
    bool ok = true;
    if (o.check_cpu) {
      std::vector<Tensor> cpu_args;
      std::vector<Tensor> full_args = cpu_inputs;
      full_args.insert(full_args.end(), weights.begin(), weights.end());
      for (const Tensor& arg : tp > 1 ? full_args : args) {
        const Tensor t = arg.to(Device::cpu());
        cpu_args.push_back(dtype_is_floating(t.dtype()) ? t.to(DType::f32) : t);
      }
      const Tensor reference = llama_forward(cpu_args, c, DType::f32, shared_layers, attention_eager)[0];
      ok = models::check_against_cpu(results, reference, dtype);
      if (tp > 1) {
        // The same model on one core: tensor parallelism changes only the order of the sums.
        std::vector<Tensor> one_core;
        for (const Tensor& arg : full_args) one_core.push_back(arg.to(device));
        const Tensor single = llama_forward(one_core, c, dtype, shared_layers, attention_eager)[0];
        ok = models::check_against(results, single, dtype, "one core") && ok;
      }
    }
    models::print_wall(results, wall_start);
    if (tp == 1 && !models::compiled_whole(compiled, args, o)) return 3;
    return ok ? 0 : 2;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}

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

// The forward pass. a = {input_ids i32 [B, S], position_ids i32 [B, S], cache_position i32 [S], inv_freq f32
// [dh / 2], then the parameters in llama_parameters' order}. Returns last_hidden_state [B, S, hidden].
std::vector<Tensor> llama_forward(const std::vector<Tensor>& a, const LlamaConfig& c, DType dtype, bool shared_layers,
                                  AttentionFn attention) {
  const Tensor &ids = a[0], &position_ids = a[1], &cache_position = a[2], &inv_freq = a[3];
  const Tensor* w = a.data() + 4;
  const int64_t b = ids.size(0), s = ids.size(1), dh = c.hidden / c.heads, n_rep = c.heads / c.kv_heads;

  Tensor x = embedding(w[0], ids);
  // The causal mask of the eager path (create_causal_mask / _update_causal_mask): min where key > query.
  // The sdpa path builds none: is_causal masks inside the fused op.
  Tensor mask;
  if (attention != &attention_sdpa) {
    const Tensor causal =
        gt(cache_position.reshape({1, s}), cache_position.reshape({s, 1})).to(dtype) * finfo_min(dtype);
    mask = causal.reshape({1, 1, s, s});
  }
  // LlamaRotaryEmbedding.forward, every forward pass (attention_scaling is 1 for the default and llama3 rope).
  const int64_t half = inv_freq.size(0);
  const Tensor inv_freq_expanded = inv_freq.reshape({1, half, 1}).expand({b, half, 1});
  const Tensor position_ids_expanded = position_ids.reshape({b, 1, s}).to(DType::f32);
  const Tensor freqs = matmul(inv_freq_expanded, position_ids_expanded).transpose(1, 2);
  const Tensor emb = cat({freqs, freqs}, -1);
  const Tensor cos_t = (cos(emb) * 1.0).to(dtype).unsqueeze(1);  // apply_rotary_pos_emb's unsqueeze(1)
  const Tensor sin_t = (sin(emb) * 1.0).to(dtype).unsqueeze(1);
  const double scaling = std::pow(static_cast<double>(dh), -0.5);

  for (int64_t l = 0; l < c.layers; ++l) {
    const Tensor* p = w + 1 + (shared_layers ? 0 : l) * static_cast<int64_t>(kParamsPerLayer);
    const Tensor residual = x;
    const Tensor h = llama_rms_norm(x, p[0], c.rms_norm_eps);
    Tensor q = linear(h, p[1]).view({b, s, -1, dh}).transpose(1, 2);
    Tensor k = linear(h, p[2]).view({b, s, -1, dh}).transpose(1, 2);
    const Tensor v = linear(h, p[3]).view({b, s, -1, dh}).transpose(1, 2);
    q = q * cos_t + rotate_half(q) * sin_t;
    k = k * cos_t + rotate_half(k) * sin_t;
    const Tensor out = attention(q, k, v, mask, scaling, n_rep)
                           .transpose(1, 2)
                           .contiguous()
                           .reshape({b, s, -1});
    x = residual + linear(out, p[4]);
    const Tensor h2 = llama_rms_norm(x, p[5], c.rms_norm_eps);
    x = x + linear(silu(linear(h2, p[6])) * linear(h2, p[7]), p[8]);
  }
  const Tensor* norm = w + 1 + (shared_layers ? 1 : c.layers) * static_cast<int64_t>(kParamsPerLayer);
  return {llama_rms_norm(x, norm[0], c.rms_norm_eps)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Llama (HF LlamaModel) on a simulated NeuronCore: eager, sdpa and compiled, profiled"};
  models::RunOptions o;
  o.config = "tiny";
  std::vector<std::string> names;
  for (const auto& [name, config] : llama_configs()) names.push_back(name);
  models::add_run_flags(app, o, names);
  CLI11_PARSE(app, argc, argv);
  if (o.out_dir.empty()) o.out_dir = "profiles/llama_" + o.config;

  try {
    const LlamaConfig& c = llama_configs().at(o.config);
    neuron::Options options;
    options.spec = o.spec;
    options.functional = !o.timing_only;
    neuron::configure(options);
    const int64_t wall_start = host_clock::wall_now_ns();
    const Device device = Device::parse(o.device);
    const DType dtype = dtype_parse(o.dtype);
    SIGHTLINE_CHECK(!(o.check_cpu && o.timing_only), "--check-cpu compares values: it needs a functional run");

    const std::vector<Parameter> all = llama_parameters(c, false);
    const double bytes = static_cast<double>(models::parameter_count(all)) * static_cast<double>(dtype_size(dtype));
    // Leave a quarter of HBM to the activations.
    const double hbm = device.is_cpu() ? 1e300 : static_cast<double>(neuron::device_info().hbm_bytes_per_core);
    const bool shared_layers = bytes > 0.75 * hbm;
    SIGHTLINE_CHECK(!shared_layers || (o.timing_only && o.weights.empty()),
                    "llama {}: {:.1f} GB of {} weights do not fit the {:.1f} GB of HBM of one simulated core; run it with "
                    "--timing-only (its layers then share one layer's weights) or with --dtype bf16",
                    o.config, bytes / 1e9, dtype_name(dtype), hbm / 1e9);
    const std::vector<Parameter> params = llama_parameters(c, shared_layers);
    std::string source;
    const std::vector<Tensor> weights = models::load_parameters(params, o, device, dtype, "model.", source);

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
    std::vector<Tensor> args = {from_vector(ids, {o.batch, o.tokens}).to(device),
                                from_vector(positions, {o.batch, o.tokens}).to(device),
                                from_vector(cache, {o.tokens}).to(device),
                                from_vector(inv_freq, {static_cast<int64_t>(inv_freq.size())}).to(device)};
    args.insert(args.end(), weights.begin(), weights.end());

    fmt::print("Llama {}: {} layers, hidden {}, {} heads ({} kv heads), intermediate {}, vocab {}, {} parameters ({}); "
               "batch {} x {} tokens on {} ({}{}); profiles go to {}/\n",
               o.config, c.layers, c.hidden, c.heads, c.kv_heads, c.intermediate, c.vocab,
               models::parameter_text(models::parameter_count(all)), dtype_name(dtype), o.batch, o.tokens, device,
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
      results.push_back(models::profile_variant(v, fn, args, o, device));
    }
    if (!device.is_cpu()) models::print_comparison(results, o);
    bool ok = true;
    if (o.check_cpu) {
      std::vector<Tensor> cpu_args;
      for (const Tensor& arg : args) {
        const Tensor t = arg.to(Device::cpu());
        cpu_args.push_back(dtype_is_floating(t.dtype()) ? t.to(DType::f32) : t);
      }
      const Tensor reference = llama_forward(cpu_args, c, DType::f32, shared_layers, attention_eager)[0];
      ok = models::check_against_cpu(results, reference, dtype);
    }
    models::print_wall(results, wall_start);
    return ok ? 0 : 2;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}

// ESM-2 (Meta's protein language model) as HuggingFace's EsmModel computes inference, on a simulated
// NeuronCore, profiled eager, with fused attention (sdpa) and compiled, side by side.
//
// The reference is transformers' modeling_esm.py (EsmEmbeddings, EsmSelfAttention, RotaryEmbedding,
// EsmLayer, EsmEncoder; docs/models.md lists its op sequence beside this one):
//
//   embeddings   word_embeddings(ids); token dropout as at inference: zero the <mask> rows, scale by
//                (1 - 0.15 * 0.8) / (1 - observed mask ratio); times the attention mask
//   mask         (1 - attention_mask[:, None, None, :]) * finfo(dtype).min, added to the scores
//   layer x N    x + dense(attn(LayerNorm(x)))  with  q = query(h) * head_dim^-0.5, rotary on q and k,
//                softmax(q k^T + mask) v;  then  a + output(gelu_erf(intermediate(LayerNorm(a))))
//   final        emb_layer_norm_after
//
// Configs are the public ESM-2 checkpoints' (facebook/esm2_t6_8M_UR50D ... esm2_t33_650M_UR50D); `tiny`
// is a one-layer model for tests. Without --weights the parameters are seeded random (it says so); with
// --weights a checkpoint's tensors are found by their HF names (an EsmForMaskedLM file's "esm." prefix
// is accepted). Each variant runs four profiled steps (wait 2, warmup 1, active 1), prints its
// key_averages table and writes a profile directory; a comparison of the variants closes the run.
//
//   esm2 --config t6_8M                              functional, f32, all three variants
//   esm2 --config t33_650M --timing-only --dtype bf16
#include <cmath>
#include <limits>
#include <map>

#include "../common/harness.h"

using namespace sightline;
using models::Parameter;

namespace {

struct EsmConfig {
  int64_t layers, hidden, heads, intermediate;
  int64_t vocab = 33;
  double layer_norm_eps = 1e-5;
  // The tokenizer's ids (facebook/esm2_*: <cls> 0, <pad> 1, <eos> 2, amino acids 4..23 (L A G V S E R T I
  // D P K Q N F Y M H W C), <mask> 32).
  int32_t cls = 0, pad = 1, eos = 2, mask = 32;
};

const std::map<std::string, EsmConfig>& esm_configs() {
  static const std::map<std::string, EsmConfig> configs = {
      {"tiny", {1, 64, 4, 256}},
      {"t6_8M", {6, 320, 20, 1280}},
      {"t12_35M", {12, 480, 20, 1920}},
      {"t30_150M", {30, 640, 20, 2560}},
      {"t33_650M", {33, 1280, 20, 5120}},
  };
  return configs;
}

// Parameters of an EsmModel without its pooler (add_pooling_layer=False), in the order the forward
// pass reads them, by their names in the HF state dict.
std::vector<Parameter> esm_parameters(const EsmConfig& c) {
  using Init = Parameter::Init;
  std::vector<Parameter> p;
  p.push_back({"embeddings.word_embeddings.weight", {c.vocab, c.hidden}});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string at = fmt::format("encoder.layer.{}.", l);
    p.push_back({at + "attention.LayerNorm.weight", {c.hidden}, Init::ones});
    p.push_back({at + "attention.LayerNorm.bias", {c.hidden}, Init::zeros});
    for (const char* proj : {"query", "key", "value"}) {
      p.push_back({at + "attention.self." + proj + ".weight", {c.hidden, c.hidden}});
      p.push_back({at + "attention.self." + proj + ".bias", {c.hidden}, Init::zeros});
    }
    p.push_back({at + "attention.output.dense.weight", {c.hidden, c.hidden}});
    p.push_back({at + "attention.output.dense.bias", {c.hidden}, Init::zeros});
    p.push_back({at + "LayerNorm.weight", {c.hidden}, Init::ones});
    p.push_back({at + "LayerNorm.bias", {c.hidden}, Init::zeros});
    p.push_back({at + "intermediate.dense.weight", {c.intermediate, c.hidden}});
    p.push_back({at + "intermediate.dense.bias", {c.intermediate}, Init::zeros});
    p.push_back({at + "output.dense.weight", {c.hidden, c.intermediate}});
    p.push_back({at + "output.dense.bias", {c.hidden}, Init::zeros});
  }
  p.push_back({"encoder.emb_layer_norm_after.weight", {c.hidden}, Init::ones});
  p.push_back({"encoder.emb_layer_norm_after.bias", {c.hidden}, Init::zeros});
  return p;
}
constexpr size_t kParamsPerLayer = 16;

// torch.finfo(dtype).min, the value HF's get_extended_attention_mask puts where the mask is 0.
double finfo_min(DType dtype) {
  return dtype == DType::bf16 ? -3.3895313892515355e38 : static_cast<double>(std::numeric_limits<float>::lowest());
}

// modeling_esm.py: rotate_half (x.chunk(2, dim=-1): two views) and apply_rotary_pos_emb.
Tensor rotate_half(const Tensor& x) {
  const std::vector<Tensor> halves = chunk(x, 2, -1);
  return cat({-halves[1], halves[0]}, -1);
}
Tensor apply_rotary(const Tensor& x, const Tensor& cos, const Tensor& sin) { return x * cos + rotate_half(x) * sin; }

// Attention of one layer: q, k, v [B, H, S, dh] (q already scaled), mask [B, 1, 1, S].
// eager: EsmSelfAttention's matmul, + mask, softmax, matmul.
Tensor attention_eager(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  const Tensor scores = matmul(q, k.transpose(-1, -2)) + mask;
  return matmul(softmax(scores, -1), v);
}
// sdpa: EsmSdpaSelfAttention calls F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0): the
// fused built-in, one execution per layer where eager has four.
Tensor attention_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  return scaled_dot_product_attention(q, k, v, mask, /*is_causal=*/false, /*scale=*/1.0);
}

// The rotary tables of RotaryEmbedding._update_cos_sin_tables for a sequence length: computed once and
// cached, as HF does on the first forward pass (so the profiled steps read the cache).
std::pair<Tensor, Tensor> rotary_tables(int64_t seq, int64_t head_dim, DType dtype, Device device) {
  std::vector<float> inv_freq;
  for (int64_t i = 0; i < head_dim; i += 2) {
    inv_freq.push_back(static_cast<float>(1.0 / std::pow(10000.0, static_cast<double>(i) / static_cast<double>(head_dim))));
  }
  const auto half = static_cast<int64_t>(inv_freq.size());
  const Tensor inv = from_vector(inv_freq, {1, half}).to(device);
  const Tensor t = arange(0.0, static_cast<double>(seq), 1.0).reshape({seq, 1}).to(device);
  const Tensor freqs = matmul(t, inv);  // torch.outer(t, inv_freq)
  const Tensor emb = cat({freqs, freqs}, -1);
  return {cos(emb).to(dtype).reshape({1, 1, seq, head_dim}), sin(emb).to(dtype).reshape({1, 1, seq, head_dim})};
}

using AttentionFn = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&);

// The forward pass. a = {input_ids i32 [B, S], attention_mask i32 [B, S], cos, sin [1, 1, S, dh], then the
// parameters in esm_parameters' order}. Returns last_hidden_state [B, S, hidden].
std::vector<Tensor> esm_forward(const std::vector<Tensor>& a, const EsmConfig& c, DType dtype, AttentionFn attention) {
  const Tensor &ids = a[0], &attention_mask = a[1], &cos = a[2], &sin = a[3];
  const Tensor* w = a.data() + 4;
  const int64_t b = ids.size(0), s = ids.size(1), d = c.hidden, heads = c.heads, dh = d / heads;

  // EsmEmbeddings.forward with token_dropout (true for ESM-2), at inference.
  Tensor embeddings = embedding(w[0], ids);
  const Tensor is_mask = eq(ids, static_cast<double>(c.mask));
  embeddings = masked_fill(embeddings, is_mask.unsqueeze(-1), 0.0);
  constexpr double kMaskRatioTrain = 0.15 * 0.8;
  const Tensor src_lengths = sum(attention_mask, {-1});
  // (ids == mask).sum(-1): a bool tensor sums as an integer one, inside aten::sum as in torch.
  const Tensor mask_ratio_observed = sum(is_mask, {-1}).to(DType::f32) / src_lengths;
  embeddings = (embeddings * (1.0 - kMaskRatioTrain) / (1.0 - mask_ratio_observed).reshape({b, 1, 1})).to(dtype);
  embeddings = (embeddings * attention_mask.unsqueeze(-1)).to(dtype);

  // EsmModel.get_extended_attention_mask: [B, 1, 1, S], 0 where attended, finfo.min elsewhere.
  const Tensor extended = (1.0 - attention_mask.reshape({b, 1, 1, s}).to(dtype)) * finfo_min(dtype);

  Tensor x = embeddings;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Tensor* p = w + 1 + l * static_cast<int64_t>(kParamsPerLayer);
    // EsmAttention: pre-LN, self-attention, output dense + residual.
    const Tensor h = layer_norm(x, p[0], p[1], c.layer_norm_eps);
    auto transpose_for_scores = [&](const Tensor& t) { return t.view({b, s, heads, dh}).permute({0, 2, 1, 3}); };
    Tensor q = transpose_for_scores(linear(h, p[2], p[3]));
    Tensor k = transpose_for_scores(linear(h, p[4], p[5]));
    const Tensor v = transpose_for_scores(linear(h, p[6], p[7]));
    q = q * std::pow(static_cast<double>(dh), -0.5);
    q = apply_rotary(q, cos, sin);
    k = apply_rotary(k, cos, sin);
    const Tensor context = attention(q, k, v, extended).permute({0, 2, 1, 3}).contiguous().view({b, s, d});
    const Tensor attention_output = linear(context, p[8], p[9]) + x;
    // EsmLayer.feed_forward_chunk: pre-LN, intermediate dense + erf gelu, output dense + residual.
    const Tensor h2 = layer_norm(attention_output, p[10], p[11], c.layer_norm_eps);
    const Tensor intermediate = gelu(linear(h2, p[12], p[13]), "none");
    x = linear(intermediate, p[14], p[15]) + attention_output;
  }
  const Tensor* final_norm = w + 1 + c.layers * static_cast<int64_t>(kParamsPerLayer);
  return {layer_norm(x, final_norm[0], final_norm[1], c.layer_norm_eps)};
}

// A protein-like batch: <cls> residues <eos>, the residues drawn from the 20 amino acids with a fixed seed;
// sequence i of the batch is shorter by i * S / (2 B) tokens, padded with <pad> and masked out; with
// mask_every K > 0 every K-th residue is <mask>, as in masked-LM inference (token dropout then rescales).
std::pair<Tensor, Tensor> esm_batch(const EsmConfig& c, int64_t batch, int64_t seq, int64_t mask_every) {
  std::vector<int32_t> ids, mask;
  Generator gen(7);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t length = std::max<int64_t>(2, seq - i * seq / (2 * batch));
    for (int64_t j = 0; j < seq; ++j) {
      int32_t id = c.pad;
      if (j == 0) id = c.cls;
      else if (j == length - 1) id = c.eos;
      else if (j < length - 1) id = 4 + static_cast<int32_t>(gen.next_u64() % 20);
      if (mask_every > 0 && j > 0 && j < length - 1 && j % mask_every == 0) id = c.mask;
      ids.push_back(id);
      mask.push_back(j < length ? 1 : 0);
    }
  }
  return {from_vector(ids, {batch, seq}), from_vector(mask, {batch, seq})};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ESM-2 (HF EsmModel) on a simulated NeuronCore: eager, sdpa and compiled, profiled"};
  models::RunOptions o;
  o.config = "t6_8M";
  std::vector<std::string> names;
  for (const auto& [name, config] : esm_configs()) names.push_back(name);
  models::add_run_flags(app, o, names);
  int64_t mask_every = 0;
  app.add_option("--mask-every", mask_every, "make every K-th residue <mask> (token dropout rescales the rest)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (o.out_dir.empty()) o.out_dir = "profiles/esm2_" + o.config;

  try {
    const EsmConfig& c = esm_configs().at(o.config);
    neuron::Options options;
    options.spec = o.spec;
    options.functional = !o.timing_only;
    neuron::configure(options);
    const int64_t wall_start = host_clock::wall_now_ns();
    const Device device = Device::parse(o.device);
    const DType dtype = dtype_parse(o.dtype);
    SIGHTLINE_CHECK(!(o.check_cpu && o.timing_only), "--check-cpu compares values: it needs a functional run");

    const std::vector<Parameter> params = esm_parameters(c);
    std::string source;
    const std::vector<Tensor> weights = models::load_parameters(params, o, device, dtype, "esm.", source);
    const auto [ids, attention_mask] = esm_batch(c, o.batch, o.tokens, mask_every);
    const auto [cos, sin] = rotary_tables(o.tokens, c.hidden / c.heads, dtype, device);
    std::vector<Tensor> args = {ids.to(device), attention_mask.to(device), cos, sin};
    args.insert(args.end(), weights.begin(), weights.end());

    fmt::print("ESM-2 {}: {} layers, hidden {}, {} heads, intermediate {}, {} parameters ({}); batch {} x {} "
               "tokens on {} ({}{}); profiles go to {}/\n",
               o.config, c.layers, c.hidden, c.heads, c.intermediate, models::parameter_text(models::parameter_count(params)),
               dtype_name(dtype), o.batch, o.tokens, device, device.is_cpu() ? "reference backend" : neuron::device_info().spec_name,
               o.timing_only ? ", timing only" : "", o.out_dir);
    fmt::print("{}\n", source);
    if (!o.save_weights.empty()) models::save_parameters(params, weights, "esm.", o);

    auto forward_with = [&c, dtype](AttentionFn attention) -> models::ModelFn {
      return [&c, dtype, attention](const std::vector<Tensor>& a) { return esm_forward(a, c, dtype, attention); };
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
    if (!device.is_cpu()) {
      models::print_comparison(results, o);
      models::print_floor(results, eager, args, dtype, models::embedding_correction(args[4], args[0]));
    }
    bool ok = true;
    if (o.check_cpu) {
      std::vector<Tensor> cpu_args;
      for (size_t i = 0; i < args.size(); ++i) {
        const Tensor t = args[i].to(Device::cpu());
        cpu_args.push_back(dtype_is_floating(t.dtype()) ? t.to(DType::f32) : t);
      }
      const Tensor reference = esm_forward(cpu_args, c, DType::f32, attention_eager)[0];
      ok = models::check_against_cpu(results, reference, dtype);
    }
    models::print_wall(results, wall_start);
    if (!models::compiled_whole(compiled, args, o)) return 3;
    return ok ? 0 : 2;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}

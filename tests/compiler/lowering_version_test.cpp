// The lowering version pinned to what the lowering emits.
//
// compile()'s disk cache keys an executable by the graph, the spec and compiler::kLoweringVersion, not
// by the executable itself (it is what the cache saves building). An entry written before a change to
// the lowering, or to a kernel it emits, is only rebuilt if the version was bumped; otherwise a later
// run loads the old executable and shows the old modeled times. This test lowers a set of graphs that
// reach every kind of kernel a compiled model uses (row loops, matmul epilogues, view epilogues, the
// attention kernel, built-ins, autocast) on both presets and compares the content hash of each
// executable (formats::neff_hash) with tests/compiler/data/lowering_fingerprint.txt, which names the
// version the hashes belong to. When they differ:
//   - the version is the file's: bump kLoweringVersion (src/compiler/lower.h) with a line saying what
//     changed, then
//   - rewrite the file: SIGHTLINE_UPDATE_GOLDEN=1 ctest --test-dir <build> -R LoweringVersion
//     (refused while the version is still the file's).
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compiler/capture.h"
#include "compiler/lower.h"
#include "compiler/passes.h"
#include "formats/neff.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Program {
  std::string name;
  Fn fn;
  std::vector<TensorMeta> metas;
  CompileOptions options{};
};

// ESM-2's feed-forward half: layer_norm, linear with bias, erf gelu, linear with bias, the residual.
std::vector<Tensor> esm_mlp(const std::vector<Tensor>& a) {
  const Tensor n = layer_norm(a[0], a[1], a[2], 1e-5);
  return {a[0] + linear(gelu(linear(n, a[3], a[4])), a[5], a[6])};
}

std::vector<Program> programs() {
  const TensorMeta x{{130, 200}, DType::f32}, w{{200}, DType::f32};
  std::vector<Program> out = {
      {"rms_norm_discovered",
       [](const std::vector<Tensor>& a) { return std::vector<Tensor>{testing::naive_rms_norm(a[0], a[1])}; },
       {x, w}},
      {"rms_norm_substituted",
       [](const std::vector<Tensor>& a) { return std::vector<Tensor>{testing::naive_rms_norm(a[0], a[1])}; },
       {x, w},
       CompileOptions{.substitute_builtins = true}},
      {"layer_norm_bf16", &testing::naive_layer_norm,
       {{{64, 300}, DType::bf16}, {{300}, DType::bf16}, {{300}, DType::bf16}}},
      {"decoder_block", &testing::decoder_block, testing::decoder_block_metas()},
      {"decoder_block_autocast", &testing::decoder_block, testing::decoder_block_metas(),
       CompileOptions{.autocast = Autocast::matmul_bf16}},
      {"esm_rotary_q", &testing::esm_rotary_q,
       {{{2, 40, 64}, DType::f32},
        {{120, 64}, DType::f32},
        {{120}, DType::f32},
        {{1, 1, 40, 24}, DType::f32},
        {{1, 1, 40, 24}, DType::f32}}},
      {"llama_rotary_k", &testing::llama_rotary_k,
       {{{1, 40, 64}, DType::bf16}, {{128, 64}, DType::bf16}, {{1, 1, 40, 32}, DType::bf16},
        {{1, 1, 40, 32}, DType::bf16}}},
      {"esm_mlp", &esm_mlp,
       {{{1, 48, 96}, DType::f32},
        {{96}, DType::f32},
        {{96}, DType::f32},
        {{384, 96}, DType::f32},
        {{384}, DType::f32},
        {{96, 384}, DType::f32},
        {{96}, DType::f32}}},
      // A projection at a model's size: its operand loads and result stores are large enough to be cut
      // into pieces (the small graphs above move each operand in one transfer).
      {"linear_1024_bf16",
       [](const std::vector<Tensor>& a) { return std::vector<Tensor>{linear(a[0], a[1]) + a[0]}; },
       {{{128, 1024}, DType::bf16}, {{1024, 1024}, DType::bf16}}},
      // ESM-2 t12's MLP: prefetched weights, biases folded into the evacuations over several panels.
      {"esm_mlp_480x1920", &testing::biased_mlp, testing::biased_mlp_metas(128, 480, 1920, DType::f32)},
      // ESM-2 t30's MLP at 32 tokens: few rows, so the linears run weight-stationary (eager_matmul.cpp).
      {"esm_mlp_32x640x2560", &testing::biased_mlp, testing::biased_mlp_metas(32, 640, 2560, DType::f32)},
      // Grouped-query attention: k and v read from their key/value heads, the repeat_kv copies not made.
      {"grouped_attention_bf16", [](const std::vector<Tensor>& a) { return testing::grouped_attention(a); },
       testing::grouped_attention_metas(8, 2, 128, 64, DType::bf16)},
      // A token embedding: the gather cut into pieces over the queues.
      {"embedding_128x480",
       [](const std::vector<Tensor>& a) { return std::vector<Tensor>{embedding(a[0], a[1])}; },
       {{{1000, 480}, DType::f32}, {{1, 128}, DType::i32}}},
  };
  return out;
}

// The fingerprint text: the version, then one line per program and preset.
std::string fingerprint() {
  std::string text = fmt::format(
      "# formats::neff_hash of what compiler::lower emits for the graphs of lowering_version_test.cpp.\n"
      "# When these change, bump compiler::kLoweringVersion (src/compiler/lower.h), then rewrite this file\n"
      "# with SIGHTLINE_UPDATE_GOLDEN=1 (see the test).\n"
      "lowering {}\n",
      kLoweringVersion);
  for (const Program& p : programs()) {
    const Graph graph = optimize(capture_graph(p.fn, p.metas, Device::cpu()), {}, p.options);
    for (const char* preset : {"trn2", "trn1"}) {
      const device::Executable exe = lower(graph, device::Spec::builtin(preset), p.name);
      text += fmt::format("{} {} {:016x}\n", p.name, preset, formats::neff_hash(exe));
    }
  }
  return text;
}

int version_of(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("lowering ")) return std::atoi(line.c_str() + 9);
  }
  return -1;
}

// Everything after the version line: the hashes.
std::string hashes_of(const std::string& text) {
  const size_t at = text.find("lowering ");
  if (at == std::string::npos) return {};
  const size_t end = text.find('\n', at);
  return end == std::string::npos ? std::string{} : text.substr(end + 1);
}

TEST(LoweringVersion, TheExecutablesOfReferenceGraphsArePinnedToTheVersion) {
  const std::string path = std::string(SIGHTLINE_TEST_DATA_DIR) + "/lowering_fingerprint.txt";
  const std::string actual = fingerprint();
  std::string expected;
  {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    expected = s.str();
  }
  const char* update = std::getenv("SIGHTLINE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    ASSERT_FALSE(!expected.empty() && version_of(expected) == kLoweringVersion && hashes_of(expected) != hashes_of(actual))
        << "the executables changed but kLoweringVersion is still " << kLoweringVersion
        << ": bump it in src/compiler/lower.h (say what changed), then regenerate " << path;
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "regenerated " << path;
  }
  ASSERT_FALSE(expected.empty()) << "missing " << path << "; create it with SIGHTLINE_UPDATE_GOLDEN=1";
  if (version_of(expected) == kLoweringVersion) {
    EXPECT_EQ(hashes_of(actual), hashes_of(expected))
        << "what the lowering emits changed, but compiler::kLoweringVersion is still " << kLoweringVersion
        << ", so disk cache entries written before the change would be run instead of rebuilt: bump it in "
           "src/compiler/lower.h (say what changed), then regenerate "
        << path << " with SIGHTLINE_UPDATE_GOLDEN=1";
  } else {
    EXPECT_EQ(actual, expected) << "kLoweringVersion is " << kLoweringVersion << " but " << path
                                << " was written at version " << version_of(expected)
                                << ": regenerate it with SIGHTLINE_UPDATE_GOLDEN=1";
  }
}

// Lowering is a pure function of the graph and the spec: the same program lowered twice is the same
// executable (else the fingerprint above would say nothing).
TEST(LoweringVersion, LoweringTwiceGivesTheSameExecutable) {
  const Program p = programs()[3];  // the decoder block: matmuls, epilogues, attention, row loops
  const Graph graph = optimize(capture_graph(p.fn, p.metas, Device::cpu()), {}, p.options);
  const device::Spec spec = device::Spec::builtin("trn2");
  EXPECT_EQ(formats::neff_hash(lower(graph, spec, p.name)), formats::neff_hash(lower(graph, spec, p.name)));
}

}  // namespace
}  // namespace sightline::compiler

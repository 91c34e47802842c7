// Golden dumps of fused graphs: a refactor must not change them by accident.
//
// The expected text lives in tests/compiler/data/<name>.txt and is compared byte for byte. After an
// intended change, regenerate the files and review the diff:
//   SIGHTLINE_UPDATE_GOLDEN=1 ctest --test-dir <build> -L compiler
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "compiler/capture.h"
#include "compiler/passes.h"
#include "programs.h"

namespace sightline::compiler {
namespace {

std::string golden_path(const std::string& name) { return std::string(SIGHTLINE_TEST_DATA_DIR) + "/" + name; }

void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  const char* update = std::getenv("SIGHTLINE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "regenerated " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << "; create it with SIGHTLINE_UPDATE_GOLDEN=1";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "the fused graph changed; if intended, regenerate with "
                                       "SIGHTLINE_UPDATE_GOLDEN=1 and review the diff";
}

Graph optimized_with_checks(const Graph& g, const CompileOptions& options = {}) {
  return optimize(g, [](std::string_view pass, const Graph& after) { verify(after, pass); }, options);
}

Graph naive_rms_norm_graph() {
  const TensorMeta metas[] = {{{4, 4096}, DType::f32}, {{4096}, DType::f32}};
  return capture_graph(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{testing::naive_rms_norm(in[0], in[1])};
      },
      metas, Device::cpu());
}

// The default compile(): the user's six ops as one row group.
TEST(Golden, RmsNorm) { expect_golden("rms_norm.txt", dump(optimized_with_checks(naive_rms_norm_graph()))); }

// CompileOptions::substitute_builtins: the built-in rms_norm instead.
TEST(Golden, RmsNormSubstituted) {
  expect_golden("rms_norm_substituted.txt",
                dump(optimized_with_checks(naive_rms_norm_graph(), CompileOptions{.substitute_builtins = true})));
}

TEST(Golden, DecoderBlock) {
  const std::vector<TensorMeta> metas = testing::decoder_block_metas();
  const Graph g = capture_graph(&testing::decoder_block, metas, Device::cpu());
  expect_golden("decoder_block.txt", dump(optimized_with_checks(g)));
}

// ESM-2's scaled rotary q: the projection and every op on its head views in one epilogue group.
TEST(Golden, RotaryHeads) {
  const TensorMeta metas[] = {{{1, 8, 32}, DType::f32}, {{40, 32}, DType::f32}, {{40}, DType::f32},
                              {{1, 1, 8, 8}, DType::f32}, {{1, 1, 8, 8}, DType::f32}};
  const Graph g = capture_graph(&testing::esm_rotary_q, metas, Device::cpu());
  expect_golden("rotary_heads.txt", dump(optimized_with_checks(g)));
}

}  // namespace
}  // namespace sightline::compiler

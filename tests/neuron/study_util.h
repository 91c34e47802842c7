// What the neuron tests share: the study's naive RMSNorm and a fresh output directory per test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "sightline/sightline.h"

namespace sightline::test {

// What a PyTorch user writes: x * rsqrt(mean(x^2, -1, keepdim) + eps) * w.
inline Tensor rms_norm_naive(const Tensor& x, const Tensor& w) {
  return x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * w;
}

// An empty directory under the temporary folder, named for the test and this process.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("sightline_{}_{}_{}", prefix, name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace sightline::test

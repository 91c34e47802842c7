// Runs a fuzz entry point over its seed corpus (SIGHTLINE_FUZZ_CORPUS) and deterministic byte
// mutations of each seed, so that builds without libFuzzer (g++, the sanitizer jobs) check the
// target's own assertions too: they trap on a disagreement between readers.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(SIGHTLINE_FUZZ_CORPUS)) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    std::ifstream in(path, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

TEST(CorpusReplay, EverySeedRuns) {
  const auto corpus = seeds();
  ASSERT_FALSE(corpus.empty()) << SIGHTLINE_FUZZ_CORPUS;
  for (const auto& seed : corpus) EXPECT_EQ(LLVMFuzzerTestOneInput(seed.data(), seed.size()), 0);
}

TEST(CorpusReplay, MutationsOfTheSeedsRun) {
  std::mt19937 gen(20261201);
  const auto corpus = seeds();
  const std::vector<uint8_t> interesting = {'{', '}', '[', ']', ',', ':', '"', '\\', '0', '-', 'e', ' ', 0xff};
  for (int i = 0; i < 300; ++i) {
    std::vector<uint8_t> bytes = corpus[static_cast<size_t>(i) % corpus.size()];
    for (int round = 0; round < 1 + i % 3 && !bytes.empty(); ++round) {
      const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(gen);
      switch (gen() % 4) {
        case 0: bytes[at] = interesting[gen() % interesting.size()]; break;
        case 1: bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at)); break;
        case 2: bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), interesting[gen() % interesting.size()]); break;
        default: bytes.resize(at); break;
      }
    }
    ASSERT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0) << i;
  }
}

}  // namespace

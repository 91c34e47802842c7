// Golden files of the profiler tests, under tests/profiler/data.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace sightline::profiler::testing {

inline std::string read_golden(const std::string& name) {
  std::ifstream file(std::string(SIGHTLINE_TEST_DATA_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(file.good()) << "missing golden file " << name;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// SIGHTLINE_UPDATE_GOLDEN=1 rewrites our own golden files instead of comparing (review the diff).
inline void expect_golden(const std::string& name, const std::string& actual) {
  if (std::getenv("SIGHTLINE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(std::string(SIGHTLINE_TEST_DATA_DIR) + "/" + name, std::ios::binary) << actual;
    return;
  }
  EXPECT_EQ(actual, read_golden(name)) << "actual table:\n" << actual;
}

}  // namespace sightline::profiler::testing

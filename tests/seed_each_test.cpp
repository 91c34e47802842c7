// Linked into every test executable (sightline_add_test): each test starts from the default generator's
// first state, as it does when CTest runs it alone in its own process. A test's random inputs then do not
// depend on which tests ran before it in the same process (a whole test binary run by hand, or under a
// sanitizer build), so a tolerance that holds under CTest holds there too.
#include <gtest/gtest.h>

#include "sightline/tensor.h"

namespace {

class SeedEachTest : public testing::EmptyTestEventListener {
  void OnTestStart(const testing::TestInfo&) override { sightline::default_generator() = sightline::Generator(); }
};

// gtest_main's main() runs after static initialization, so the listener is in place before the first test.
const bool kRegistered = [] {
  testing::UnitTest::GetInstance()->listeners().Append(new SeedEachTest);  // the listener list owns it
  return true;
}();

}  // namespace

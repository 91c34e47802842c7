// CompactVector: the one-pointer list a FunctionEvent keeps its shapes, stack, args, children and
// kernels in. It must behave as the std::vector it replaced for what the events do with it.
#include "sightline/profiler/compact_vector.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sightline/profiler/events.h"

namespace sightline::profiler {
namespace {

TEST(profiler_compact_vector, is_one_pointer_and_allocates_nothing_when_empty) {
  static_assert(sizeof(CompactVector<std::string>) == sizeof(void*));
  const CompactVector<std::int64_t> empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.begin(), empty.end());
  EXPECT_EQ(empty.to_vector(), std::vector<std::int64_t>{});
}

TEST(profiler_compact_vector, grows_keeping_its_elements_in_order) {
  CompactVector<std::string> v;
  std::vector<std::string> expected;
  for (int i = 0; i < 100; ++i) {
    // Longer than the small-string buffer, so a lost or doubly freed element would show.
    v.push_back("frame number " + std::to_string(i) + " of a long call stack");
    expected.push_back("frame number " + std::to_string(i) + " of a long call stack");
  }
  EXPECT_EQ(v.size(), 100u);
  EXPECT_GE(v.capacity(), 100u);
  EXPECT_EQ(v, expected);
  EXPECT_EQ(v.front(), expected.front());
  EXPECT_EQ(v.back(), expected.back());
  EXPECT_EQ(std::vector<std::string>(v.rbegin(), v.rend()), std::vector<std::string>(expected.rbegin(), expected.rend()));
}

TEST(profiler_compact_vector, push_back_of_its_own_element_survives_growth) {
  CompactVector<std::string> v = {"a long string that lives on the heap, element zero"};
  for (int i = 0; i < 20; ++i) v.push_back(v[0]);  // grows at 4, 8, 16: v[0] is read before it moves
  ASSERT_EQ(v.size(), 21u);
  for (const std::string& s : v) EXPECT_EQ(s, "a long string that lives on the heap, element zero");
}

TEST(profiler_compact_vector, copies_moves_and_assigns_as_a_vector) {
  CompactVector<std::vector<std::int64_t>> a = {{128}, {128, 64}, {}};
  CompactVector<std::vector<std::int64_t>> b = a;
  EXPECT_EQ(a, b);
  b[1].push_back(7);
  EXPECT_EQ(a[1], (std::vector<std::int64_t>{128, 64}));  // a deep copy
  CompactVector<std::vector<std::int64_t>> c = std::move(b);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty, as documented
  EXPECT_EQ(c[1], (std::vector<std::int64_t>{128, 64, 7}));
  c = a;
  EXPECT_EQ(c, a);
  c = c;  // self-assignment keeps it
  EXPECT_EQ(c, a);
  const std::vector<std::vector<std::int64_t>> from_vector = {{1, 2}};
  c = from_vector;
  EXPECT_EQ(c, from_vector);
  c = {{3}, {4}};
  EXPECT_EQ(c, (std::vector<std::vector<std::int64_t>>{{3}, {4}}));
  c.clear();
  EXPECT_TRUE(c.empty());
  c.emplace_back().push_back(5);  // emplace_back returns the new element
  EXPECT_EQ(c, (std::vector<std::vector<std::int64_t>>{{5}}));
}

TEST(profiler_compact_vector, inserts_a_range_at_its_end) {
  CompactVector<std::int64_t> v = {1, 2};
  const std::vector<std::int64_t> more = {3, 4, 5};
  v.insert(v.end(), more.begin(), more.end());
  v.insert(v.end(), more.begin(), more.begin());  // an empty range changes nothing
  EXPECT_EQ(v, (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  CompactVector<std::int64_t> empty;
  empty.insert(empty.end(), v.begin(), v.end());
  EXPECT_EQ(empty, v);
}

TEST(profiler_compact_vector, keeps_the_event_small) {
  // What a collected trace writes per event: before CompactVector the five lists took 120 bytes.
  EXPECT_LE(sizeof(FunctionEvent), 216u);
  FunctionEvent event;
  event.args.push_back({"exec_id", std::int64_t{7}});
  event.args.push_back({"executable", std::string("a name long enough to need the heap")});
  FunctionEvent copy = event;
  ASSERT_EQ(copy.args.size(), 2u);
  EXPECT_EQ(copy.args[0].key, "exec_id");
  EXPECT_EQ(std::get<std::string>(copy.args[1].value), "a name long enough to need the heap");
}

}  // namespace
}  // namespace sightline::profiler

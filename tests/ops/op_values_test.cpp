// The ops issue #18 added, on the CPU reference, against values computed in float64 with Python's math
// module (math.erf, math.tanh, math.sin, math.cos): erf, gelu in both of torch's forms, sin, cos, rsub.
#include <cmath>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sightline/sightline.h"

using namespace sightline;
using ::testing::HasSubstr;

namespace {

std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).to(DType::f32).contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

void expect_values(const Tensor& got, const std::vector<double>& want, double tol, const char* what) {
  const std::vector<float> g = values_of(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], tol) << what << " element " << i;
}

const std::vector<float> kX = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f};
Tensor x() { return from_vector(kX, {static_cast<int64_t>(kX.size())}); }

}  // namespace

TEST(OpValues, Erf) {
  // erf(0.5) = 0.5204998778, erf(1) = 0.8427007929, erf(2) = 0.9953222650, erf(3) = 0.9999779095.
  expect_values(erf(x()), {-0.9999779095, -0.8427007929, -0.5204998778, 0.0, 0.5204998778, 0.8427007929,
                           0.9953222650},
                1e-6, "erf");
}

TEST(OpValues, GeluBothForms) {
  // torch.nn.functional.gelu(x) (approximate="none") = x * Phi(x); Phi(1) = 0.8413447461.
  expect_values(gelu(x()), {-0.0040496941, -0.1586552539, -0.1542687694, 0.0, 0.3457312306, 0.8413447461,
                            1.9544997361},
                1e-6, "gelu none");
  EXPECT_EQ(values_of(gelu(x(), "none")), values_of(gelu(x())));
  // approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  expect_values(gelu(x(), "tanh"), {-0.0036373921, -0.1588080094, -0.1542859902, 0.0, 0.3457140098,
                                    0.8411919906, 1.9545976941},
                1e-6, "gelu tanh");
  try {
    (void)gelu(x(), "fast");
    ADD_FAILURE() << "gelu accepted approximate='fast'";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("approximate must be 'none' (the exact erf form) or 'tanh', got 'fast'"));
  }
}

TEST(OpValues, SinCos) {
  expect_values(sin(x()), {-0.1411200081, -0.8414709848, -0.4794255386, 0.0, 0.4794255386, 0.8414709848,
                           0.9092974268},
                1e-6, "sin");
  expect_values(cos(x()), {-0.9899924966, 0.5403023059, 0.8775825619, 1.0, 0.8775825619, 0.5403023059,
                           -0.4161468365},
                1e-6, "cos");
}

TEST(OpValues, UnaryFloatOpsPromoteIntegers) {
  const Tensor i = from_vector(std::vector<int32_t>{0, 1, 2}, {3});
  EXPECT_EQ(erf(i).dtype(), DType::f32);
  EXPECT_EQ(sin(i).dtype(), DType::f32);
  expect_values(cos(i), {1.0, 0.5403023059, -0.4161468365}, 1e-6, "cos i32");
}

TEST(OpValues, Rsub) {
  // rsub(a, b) = b - a; a scalar on the left of `-` is one aten::rsub, as in torch.
  expect_values(1.0 - x(), {4.0, 2.0, 1.5, 1.0, 0.5, 0.0, -1.0}, 0, "1 - x");
  expect_values(rsub(x(), 2.5), {5.5, 3.5, 3.0, 2.5, 2.0, 1.5, 0.5}, 0, "rsub scalar");
  const Tensor b = from_vector(std::vector<float>{10.0f}, {1});
  expect_values(rsub(x(), b), {13.0, 11.0, 10.5, 10.0, 9.5, 9.0, 8.0}, 0, "rsub broadcast tensor");
  const Tensor i = from_vector(std::vector<int32_t>{1, 2, 3}, {3});
  EXPECT_EQ((1.0 - i).dtype(), DType::i32);
  EXPECT_EQ((0.5 - i).dtype(), DType::f32);  // a fractional scalar makes an integer tensor f32
  expect_values(0.5 - i, {-0.5, -1.5, -2.5}, 0, "0.5 - i32");
}

TEST(OpValues, ComparisonsWriteBoolAndNanComparesUnequal) {
  const float nan = std::nanf("");
  const Tensor a = from_vector(std::vector<float>{1.0f, 2.0f, nan, -1.0f}, {4});
  const Tensor b = from_vector(std::vector<float>{1.0f, 3.0f, nan, -2.0f}, {4});
  EXPECT_EQ(eq(a, b).dtype(), DType::boolean);
  expect_values(eq(a, b), {1, 0, 0, 0}, 0, "eq");
  expect_values(ne(a, b), {0, 1, 1, 1}, 0, "ne");
  expect_values(lt(a, b), {0, 1, 0, 0}, 0, "lt");
  expect_values(le(a, b), {1, 1, 0, 0}, 0, "le");
  expect_values(gt(a, b), {0, 0, 0, 1}, 0, "gt");
  expect_values(ge(a, b), {1, 0, 0, 1}, 0, "ge");
  expect_values(gt(a, 1.5), {0, 1, 0, 0}, 0, "gt scalar");
  // An i32 tensor against a fractional scalar compares in f32 (torch.result_type), not truncated.
  const Tensor i = from_vector(std::vector<int32_t>{0, 1, 2}, {3});
  EXPECT_EQ(result_type(i, 0.5), DType::f32);
  expect_values(lt(i, 0.5), {1, 0, 0}, 0, "i32 < 0.5");
  expect_values(eq(i, 1.0), {0, 1, 0}, 0, "i32 == 1");
  // A bool mask against 2 compares as integers: True == 2 is false, as in torch.
  const Tensor mask = gt(i, 0.5);
  EXPECT_EQ(result_type(mask, 2.0), DType::i32);
  expect_values(eq(mask, 2.0), {0, 0, 0}, 0, "mask == 2");
  expect_values(eq(mask, 1.0), {0, 1, 1}, 0, "mask == 1");
}

TEST(OpValues, WhereAndMaskedFill) {
  const Tensor x = from_vector(std::vector<float>{1.0f, -2.0f, 3.0f, -4.0f}, {4});
  const Tensor mask = gt(x, 0.0);
  expect_values(where(mask, x, from_vector(std::vector<float>{10.0f}, {1})), {1, 10, 3, 10}, 0, "where");
  expect_values(masked_fill(x, mask, 0.5), {0.5, -2, 0.5, -4}, 0, "masked_fill");
  // a and b promote as add would: i32 and f32 give f32.
  const Tensor i = from_vector(std::vector<int32_t>{7, 8, 9, 10}, {4});
  EXPECT_EQ(where(mask, i, x).dtype(), DType::f32);
  expect_values(where(mask, i, x), {7, -2, 9, -4}, 0, "where i32/f32");
  try {
    (void)where(x, x, x);
    ADD_FAILURE() << "where accepted an f32 cond";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("aten::where: cond must be a bool tensor"));
  }
  try {
    (void)masked_fill(x, gt(from_vector(std::vector<float>{1.0f, 2.0f}, {2, 1}), 0.0), 1.0);
    ADD_FAILURE() << "masked_fill accepted a mask that broadcasts beyond the input";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not broadcast to the input's shape [4]"));
  }
}

TEST(OpValues, BoolDtypeConvertsPrintsAndRefusesArithmetic) {
  const Tensor mask = gt(from_vector(std::vector<float>{-1.0f, 0.5f, 2.0f}, {3}), 0.0);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(dtype_parse("bool"), DType::boolean);
  EXPECT_FALSE(dtype_is_floating(DType::boolean));
  EXPECT_EQ(dtype_promote(DType::boolean, DType::i32), DType::i32);
  EXPECT_EQ(dtype_promote(DType::bf16, DType::boolean), DType::bf16);
  EXPECT_EQ(mask.to_string(), "tensor([False,  True,  True])");
  expect_values(mask.to(DType::f32), {0, 1, 1}, 0, "bool -> f32");
  EXPECT_EQ(mask.to(DType::i32).to_string(), "tensor([0, 1, 1], dtype=i32)");
  // Nonzero (NaN too) converts to true.
  const Tensor f = from_vector(std::vector<float>{0.0f, -0.0f, 3.0f, std::nanf("")}, {4});
  EXPECT_EQ(f.to(DType::boolean).to_string(), "tensor([False, False,  True,  True])");
  try {
    (void)add(mask, mask);
    ADD_FAILURE() << "add accepted bool tensors";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("aten::add: got a bool tensor"));
    EXPECT_THAT(e.what(), HasSubstr("cast with .to(DType::f32)"));
  }
  EXPECT_THROW((void)mean(mask), Error);
  EXPECT_THROW((void)amax(mask), Error);
}

TEST(OpValues, CumsumAndArgmax) {
  const Tensor x = from_vector(std::vector<float>{1, 3, 3, -2, NAN, 5}, {2, 3});
  EXPECT_EQ(cumsum(x, 1).to_string(), cumsum(x, -1).to_string());
  EXPECT_EQ(argmax(x, 1).to_string(), "tensor([1, 1], dtype=i32)");  // a tie keeps the first; NaN wins
  EXPECT_EQ(argmax(x, 0, true).to_string(), "tensor([[0, 1, 1]], dtype=i32)");
  const Tensor mask = gt(x, 0.0);
  EXPECT_EQ(cumsum(mask, 1).to_string(), "tensor([[1, 2, 3],\n        [0, 0, 1]], dtype=i32)");
  EXPECT_THROW((void)argmax(zeros({2, 0}), 1), Error);
}

// topk's order: by value (NaN above every number for largest, below for smallest, as torch's
// comparators), equal values in ascending index; indices i32; k = 0 and k past the dim.
TEST(OpValues, TopkOrderTiesAndNaN) {
  const Tensor x = from_vector(std::vector<float>{1, 3, 3, -2, NAN, 5}, {2, 3});
  const TopkResult top = topk(x, 2, 1);
  EXPECT_EQ(top.indices.to_string(), "tensor([[1, 2],\n        [1, 2]], dtype=i32)");
  const std::vector<float> values(top.values.data<float>(), top.values.data<float>() + 4);
  EXPECT_EQ(values[0], 3.0f);
  EXPECT_EQ(values[1], 3.0f);
  EXPECT_TRUE(std::isnan(values[2]));
  EXPECT_EQ(values[3], 5.0f);
  const TopkResult low = topk(x, 2, -1, /*largest=*/false);
  const std::vector<float> low_values(low.values.data<float>(), low.values.data<float>() + 4);
  EXPECT_EQ(low_values, (std::vector<float>{1, 3, -2, 5}));
  EXPECT_EQ(low.indices.to_string(), "tensor([[0, 1],\n        [0, 2]], dtype=i32)");  // NaN last
  const TopkResult cols = topk(x, 1, 0);
  EXPECT_EQ(cols.indices.to_string(), "tensor([[0, 1, 1]], dtype=i32)");
  EXPECT_EQ(topk(x, 0, 1).values.shape(), (Dims{2, 0}));
  // Along a strided dim: x^T's columns are x's rows.
  EXPECT_EQ(topk(x.transpose(0, 1), 2, 0).indices.to_string(), "tensor([[1, 1],\n        [2, 2]], dtype=i32)");
  const Tensor ints = from_vector(std::vector<int32_t>{4, 4, 1, 4}, {4});
  EXPECT_EQ(topk(ints, 3).indices.to_string(), "tensor([0, 1, 3], dtype=i32)");
  EXPECT_EQ(topk(ints, 3).values.to_string(), "tensor([4, 4, 4], dtype=i32)");
  EXPECT_THROW((void)topk(x, 4, 1), Error);
  EXPECT_THROW((void)dispatch(OpId::topk, std::vector<Tensor>{x}, OpAttrs{}), Error);  // two outputs
}

// sum of a bool tensor counts the true elements in an integer dtype (torch: int64; here i32), with no cast
// op before it.
TEST(OpValues, SumOfBoolCountsInI32) {
  const Tensor mask = gt(from_vector(std::vector<float>{-1.0f, 0.5f, 2.0f, 3.0f, -2.0f, 0.0f}, {2, 3}), 0.0);
  EXPECT_EQ(sum(mask).dtype(), DType::i32);
  EXPECT_EQ(sum(mask).to_string(), "tensor(3, dtype=i32)");
  EXPECT_EQ(sum(mask, {-1}).to_string(), "tensor([2, 1], dtype=i32)");
  EXPECT_EQ(sum(mask.transpose(0, 1), {-1}, true).to_string(), "tensor([[1],\n        [1],\n        [1]], dtype=i32)");
}

TEST(OpValues, SelectChunkSplitAreViews) {
  const Tensor x = arange(0.0, 24.0).reshape({2, 3, 4});
  const Tensor row = x.select(1, -1);  // x[:, 2, :]
  EXPECT_EQ(row.shape(), (Dims{2, 4}));
  EXPECT_TRUE(row.shares_storage(x));
  expect_values(row, {8, 9, 10, 11, 20, 21, 22, 23}, 0, "select");
  expect_values(x.select(0, 1).select(0, 0), {12, 13, 14, 15}, 0, "select twice");
  EXPECT_THROW((void)x.select(1, 3), Error);
  const std::vector<Tensor> halves = chunk(x, 2, -1);  // the rotary halves
  ASSERT_EQ(halves.size(), 2u);
  EXPECT_EQ(halves[1].shape(), (Dims{2, 3, 2}));
  EXPECT_TRUE(halves[1].shares_storage(x));
  expect_values(halves[1].select(0, 0).select(0, 0), {2, 3}, 0, "chunk");
  // torch.chunk(arange(5), 3) gives sizes 2, 2, 1; split by 2 the same; split by sizes as given.
  const Tensor five = arange(0.0, 5.0);
  std::vector<int64_t> sizes;
  for (const Tensor& t : chunk(five, 3)) sizes.push_back(t.numel());
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  sizes.clear();
  for (const Tensor& t : split(five, 2)) sizes.push_back(t.numel());
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  const std::vector<Tensor> parts = split(five, std::vector<int64_t>{1, 4});
  expect_values(parts[1], {1, 2, 3, 4}, 0, "split sizes");
  try {
    (void)split(five, std::vector<int64_t>{1, 2});
    ADD_FAILURE() << "split accepted sizes that do not sum to the dim";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("split sizes [1, 2] sum to 3, but dim 0 has size 5"));
  }
}

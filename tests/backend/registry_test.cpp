#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "sightline/sightline.h"

using namespace sightline;
using ::testing::HasSubstr;

namespace {

// A minimal out-of-tree backend: host memory, one kernel (add, via the cpu reference on copies).
struct ToyBackend : Backend {
  ToyBackend() : Backend("toy") { kernels[static_cast<size_t>(OpId::neg)] = &toy_neg; }
  int device_count() const override { return 2; }
  std::shared_ptr<Storage> allocate(Device device, size_t nbytes) override {
    return std::make_shared<Storage>(device, nbytes, ::operator new(std::max<size_t>(nbytes, 1)),
                                     [](Storage& s) { ::operator delete(s.data()); }, nullptr);
  }
  void copy_from_host(const Storage& dst, size_t off, const void* src, size_t n) override {
    std::memcpy(static_cast<char*>(dst.data()) + off, src, n);
    ++copies_in;
  }
  void copy_to_host(void* dst, const Storage& src, size_t off, size_t n) override {
    std::memcpy(dst, static_cast<const char*>(src.data()) + off, n);
  }
  static void toy_neg(const OpCall& call, Tensor& out) {
    const Tensor& x = call.inputs[0];
    const float* src = static_cast<const float*>(x.storage()->data()) + x.offset();
    float* dst = static_cast<float*>(out.storage()->data());
    for (int64_t i = 0; i < out.numel(); ++i) dst[i] = -src[i];
  }
  int copies_in = 0;
};

ToyBackend* toy() {
  static ToyBackend* instance = [] {
    auto b = std::make_unique<ToyBackend>();
    ToyBackend* raw = b.get();
    register_backend(std::move(b));
    return raw;
  }();
  return instance;
}

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

struct Recorded {
  std::vector<std::string> events;
};

uint64_t before_hook(const OpCall& call, void* user) {
  static_cast<Recorded*>(user)->events.push_back(fmt::format("begin {}", op_name(call.op)));
  return 7;
}
void after_hook(const OpCall& call, const Tensor& out, uint64_t token, void* user) {
  static_cast<Recorded*>(user)->events.push_back(
      fmt::format("end {} {} token={}", op_name(call.op), out.defined() ? out.shape().to_string() : "-", token));
}

}  // namespace

TEST(Registry, CustomBackendRegistersLikeCpu) {
  ToyBackend* b = toy();
  const Device d = Device::parse("toy:1");
  EXPECT_EQ(d.to_string(), "toy:1");
  EXPECT_EQ(&backend(d.backend), b);
  EXPECT_EQ(find_backend("cpu")->name(), "cpu");
  Tensor x = arange(4).to(d);
  EXPECT_EQ(x.device(), d);
  EXPECT_EQ(b->copies_in, 1);
  Tensor y = neg(x);
  EXPECT_EQ(y.device(), d);
  const Tensor h = y.to(Device::cpu());
  EXPECT_EQ(h.data<float>()[3], -3.0f);
  EXPECT_THAT(error_of([&] { (void)x.data<float>(); }), HasSubstr("host access to the memory of a tensor on toy:1"));
  EXPECT_THAT(error_of([] { (void)Device::parse("toy:2"); }), HasSubstr("has 2 device(s), valid indices are 0..1"));
  EXPECT_THAT(error_of([] { register_backend(std::make_unique<ToyBackend>()); }), HasSubstr("already registered"));
}

TEST(Registry, MissingKernelNamesTheBackendsThatHaveIt) {
  toy();
  Tensor x = ones({2}).to(Device::parse("toy:0"));
  EXPECT_THAT(error_of([&] { (void)exp(x); }),
              HasSubstr("aten::exp is not implemented for device toy:0; "
                        "it is only available for these backends: [cpu, neuron]"));
  EXPECT_THAT(error_of([&] { (void)add(x, ones({2})); }), HasSubstr("inputs are on different devices (toy:0 for input 0, cpu"));
}

TEST(Dispatch, ObserverSeesEveryOpNested) {
  Recorded rec;
  DispatchObserver observer{&before_hook, &after_hook, &rec};
  set_dispatch_observer(&observer);
  Tensor x = ones({2, 3});
  Tensor y = (x * x).transpose(0, 1).reshape({6});
  EXPECT_THROW((void)add(x, ones({4})), Error);
  set_dispatch_observer(nullptr);
  (void)(x + x);  // not observed any more
  const std::vector<std::string> expected = {
      "begin aten::fill_", "end aten::fill_ [2, 3] token=7",
      "begin aten::mul", "end aten::mul [2, 3] token=7",
      "begin aten::transpose", "end aten::transpose [3, 2] token=7",
      "begin aten::reshape", "begin aten::contiguous", "end aten::contiguous [3, 2] token=7",
      "end aten::reshape [6] token=7",
      "begin aten::fill_", "end aten::fill_ [4] token=7",
      "begin aten::add", "end aten::add - token=7"};
  EXPECT_EQ(rec.events, expected);
}

TEST(OpTable, IsConsistent) {
  for (int i = 0; i < kOpCount; ++i) {
    const OpInfo& info = kOpTable[i];
    EXPECT_EQ(static_cast<int>(info.id), i) << info.name;
    EXPECT_EQ(info.name.substr(0, 6), "aten::") << info.name;
    if (info.is_view) {
      EXPECT_EQ(info.kind, OpKind::movement) << info.name;
    }
  }
  EXPECT_EQ(op_name(OpId::mul), "aten::mul");
  // Every non-view op has a cpu kernel: the cpu backend is the reference.
  const Backend& cpu = *find_backend("cpu");
  for (const OpInfo& info : kOpTable) {
    if (!info.is_view && info.id != OpId::copy) {
      EXPECT_NE(cpu.kernels[static_cast<size_t>(info.id)], nullptr) << info.name;
    }
  }
}

TEST(OpTable, CostRules) {
  const Tensor a = ones({64, 32}), b = ones({32, 16});
  const Tensor in[] = {a, b};
  OpAttrs attrs;
  const OpCall call{OpId::matmul, in, attrs};
  const OpCost c = op_cost(call, ones({64, 16}));
  EXPECT_EQ(c.flops, 2.0 * 64 * 16 * 32);
  EXPECT_EQ(c.bytes, (64 * 32 + 32 * 16 + 64 * 16) * 4.0);
  const Tensor x[] = {a, a};
  EXPECT_EQ(op_cost(OpCall{OpId::add, x, attrs}, a).flops, 64 * 32);
}

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "neuron/neuron.h"
#include "sightline/sightline.h"

using namespace sightline;
using ::testing::HasSubstr;

TEST(NeuronBackend, RegistersLikeCpuAndKeepsMemoryApart) {
  const Device d = Device::parse("neuron:0");
  EXPECT_EQ(d.to_string(), "neuron:0");
  EXPECT_NE(find_backend("neuron"), nullptr);
  Tensor x = arange(6).to(d);
  try {
    (void)x.data<float>();
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("host access to the memory of a tensor on neuron:0"));
  }
  EXPECT_EQ(x.view({2, 3}).transpose(0, 1).contiguous().to(Device::cpu()).data<float>()[1], 3.0f);
  EXPECT_THAT(x.to_string(), HasSubstr("device='neuron:0'"));
}

TEST(NeuronBackend, ScalarOperandIsAHostToDeviceCopy) {
  runtime::Runtime& rt = neuron::runtime();
  const Device d = Device::parse("neuron:0");
  Tensor x = ones({128, 64}).to(d);
  neuron::synchronize();
  runtime::CaptureOptions cap;
  cap.enabled = true;
  rt.set_capture(cap);
  Tensor y = x + 1e-6;
  neuron::synchronize();
  const runtime::Captured c = rt.drain();
  rt.set_capture({});
  int copies = 0, runs = 0;
  for (const auto& e : c.events) {
    copies += e.kind == runtime::RuntimeEventKind::copy_in;
    runs += e.kind == runtime::RuntimeEventKind::exec_running;
  }
  EXPECT_EQ(copies, 1);
  EXPECT_EQ(runs, 1);
}

TEST(NeuronBackend, EagerExecutablesAreCachedByShape) {
  const Device d = Device::parse("neuron:0");
  Tensor x = ones({64, 32}).to(d);
  (void)(x * x);
  const size_t after_first = neuron::eager_cache_size();
  (void)(x * x);
  EXPECT_EQ(neuron::eager_cache_size(), after_first);
  (void)(ones({64, 33}).to(d) * ones({64, 33}).to(d));
  EXPECT_EQ(neuron::eager_cache_size(), after_first + 1);
}

TEST(NeuronBackend, DeviceMemoryExhaustionIsAClearError) {
  const Device d = Device::parse("neuron:1");
  const uint64_t free_bytes = neuron::runtime().free_bytes(1);
  try {
    (void)empty({static_cast<int64_t>(free_bytes / 4 + 1024)}, TensorOptions(DType::f32, d));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("device memory exhausted on neuron core 1"));
  }
  EXPECT_EQ(neuron::runtime().free_bytes(1), free_bytes);
}

#include "motley/exec/compute_device.h"

#include <gtest/gtest.h>

#include <string>

namespace motley {
namespace {

TEST(ComputeDevice, ParsesCpuCudaAndAnIndexedGpu) {
  auto cpu = parse_compute_device("cpu");
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_TRUE(cpu->is_cpu());
  auto any_gpu = parse_compute_device("cuda");
  ASSERT_TRUE(any_gpu.is_ok());
  EXPECT_TRUE(any_gpu->is_cuda());
  EXPECT_FALSE(any_gpu->has_index());
  auto third = parse_compute_device("cuda:12");
  ASSERT_TRUE(third.is_ok());
  EXPECT_EQ(third->index(), 12);
  for (const std::string bad : {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1x",
                                "cuda:1234", "cpu:0", ""}) {
    auto r = parse_compute_device(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(
        r.status().message(),
        "--device: expected cpu, cuda (each rank its local GPU) or cuda:N, got '" + bad + "'");
  }
}

TEST(ComputeDevice, TheCpuIsAlwaysThereAndAGpuOnlyWhereBuiltAndVisible) {
  auto cpu = resolve_compute_device(c10::Device(c10::kCPU), 3);
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_TRUE(cpu->is_cpu());
  EXPECT_FALSE(peak_device_memory(c10::Device(c10::kCPU)).has_value());
  auto gpu = resolve_compute_device(c10::Device(c10::kCUDA), 1);
  if (!built_with_cuda()) {
    ASSERT_FALSE(gpu.is_ok());
    EXPECT_EQ(gpu.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(gpu.status().message().find("built against a libtorch without CUDA"),
              std::string::npos)
        << gpu.status().message();
  } else if (gpu.is_ok()) {
    // Local rank 1 gets a GPU of this machine, the second one when there are several.
    EXPECT_TRUE(gpu->is_cuda());
    EXPECT_TRUE(gpu->has_index());
  } else {
    EXPECT_NE(gpu.status().message().find("no CUDA device is visible"), std::string::npos)
        << gpu.status().message();
  }
}

}  // namespace
}  // namespace motley

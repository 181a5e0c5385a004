#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  // NVLink multicast stays off in every test and in the processes tests start (unless the caller set otherwise).
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

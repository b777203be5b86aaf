// cublas_loader.cc: cuBLAS is not mapped until its first call, then it is, and the calls
// reach the real library. No device needed (the status strings take none).
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "gtest/gtest.h"

namespace {

bool CublasMapped() {
  const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);
  return h != nullptr;
}

TEST(CublasLoaderTest, LoadsTheLibraryOnFirstUse) {
  // Every test binary runs this first or alone (ctest runs one test a process).
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 1) {
    EXPECT_FALSE(CublasMapped()) << "cuBLAS is mapped before any call";
  }
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_TRUE(CublasMapped());
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "");
}

}  // namespace

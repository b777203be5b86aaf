// The cuBLAS entry points the CUDA runner calls (cublasCreate, cublasDestroy,
// cublasSetStream, cublasGemmEx and the two status strings), resolved from
// libcublas.so.<CUBLAS_VER_MAJOR> on the first call instead of linked: a worker that never
// builds a CUDA runner (--device=cpu) then never maps cuBLAS, whose load-time relocations
// (libcublasLt's above all) held about 62 MiB of a CPU worker's resident memory.
// The library is looked up the way the dynamic linker would have (the binary's RUNPATH,
// then ld.so.conf). If it cannot be loaded, cublasCreate answers
// CUBLAS_STATUS_NOT_INITIALIZED and the loader's error is logged once; the other calls
// are only reached with a handle cublasCreate made. Thread-safe (a function-local static).
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#include "glog/logging.h"

namespace {

struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // (cublas_api.h also has an inline C++ overload of cublasGemmEx: the type is spelled out.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*,
                            cudaDataType, int, const void*, void*, cudaDataType, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) status_name = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  bool ok() const {
    return create && destroy && set_stream && gemm_ex && status_name && status_string;
  }
};

template <typename Fn>
void Resolve(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr) LOG(ERROR) << "cuBLAS has no " << name << ": " << dlerror();
}

const Cublas& Lib() {
  static const Cublas lib = [] {
    Cublas c;
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      LOG(ERROR) << "cannot load " << name << " (the CUDA runner's matmuls): " << dlerror();
      return c;
    }
    Resolve(handle, "cublasCreate_v2", &c.create);
    Resolve(handle, "cublasDestroy_v2", &c.destroy);
    Resolve(handle, "cublasSetStream_v2", &c.set_stream);
    Resolve(handle, "cublasGemmEx", &c.gemm_ex);
    Resolve(handle, "cublasGetStatusName", &c.status_name);
    Resolve(handle, "cublasGetStatusString", &c.status_string);
    if (!c.ok()) return Cublas();
    LOG(INFO) << "loaded " << name;
    return c;
  }();
  return lib;
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  const Cublas& c = Lib();
  return c.ok() ? c.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  return Lib().destroy(handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return Lib().set_stream(handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  return Lib().gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                       beta, C, Ctype, ldc, computeType, algo);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  const Cublas& c = Lib();
  return c.ok() ? c.status_name(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  const Cublas& c = Lib();
  return c.ok() ? c.status_string(status) : "libcublas could not be loaded (see the log)";
}

}  // extern "C"

// CudaGraphs: capture, instantiate and replay CUDA graphs of a step's plan (Note [step graphs]
// in backend.h).
#include "runtime/backends/cuda_graphs.h"

#include "runtime/backends/cuda_context.h"
#include "runtime/core/check.h"

namespace remat {

CudaGraphs::~CudaGraphs() {
  for (cudaGraphExec_t x : execs_)
    if (x) (void)cudaGraphExecDestroy(x);
  if (step_device_) (void)cudaFree(step_device_);
}

void CudaGraphs::init() {
  // 8 bytes outside the budget, like cuDNN's and cuBLAS's own buffers (backend.cpp's header),
  // taken before any budget's region is.
  if (!step_device_) REMAT_CUDA_CHECK(cudaMalloc(&step_device_, sizeof(uint64_t)));
}

void CudaGraphs::begin(CudaContext& cc) {
  REMAT_CHECK(!cc.capturing, "a CUDA graph capture is already open");
  REMAT_CHECK(step_device_, "CudaGraphs::begin before init");
  REMAT_CUDA_CHECK(cudaStreamBeginCapture(cc.stream, cudaStreamCaptureModeThreadLocal));
  cc.capturing = true;
  cc.step_device = step_device_;
}

int CudaGraphs::end(CudaContext& cc, std::string* why, int64_t* launches) {
  REMAT_CHECK(cc.capturing, "no CUDA graph capture is open");
  cc.capturing = false;
  cc.step_device = nullptr;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(cc.stream, &graph);
  if (e != cudaSuccess || !graph) {
    (void)cudaGetLastError();
    if (graph) (void)cudaGraphDestroy(graph);
    *why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
    return -1;
  }
  size_t nodes = 0;
  e = cudaGraphGetNodes(graph, nullptr, &nodes);
  cudaGraphExec_t exec = nullptr;
  // A library may allocate stream-ordered memory inside the capture and free it later (cuBLAS
  // its workspace from CUDA 12.2 when it has none of its own; ours has, backend.cpp's header):
  // each launch then frees what the last one allocated.
  if (e == cudaSuccess)
    e = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    return -1;
  }
  *launches = static_cast<int64_t>(nodes);
  execs_.push_back(exec);
  return static_cast<int>(execs_.size()) - 1;
}

void CudaGraphs::abort(CudaContext& cc) {
  if (!cc.capturing) return;
  cc.capturing = false;
  cc.step_device = nullptr;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(cc.stream, &graph);
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // the error that invalidated the capture is reported by the caller
}

void CudaGraphs::replay(const CudaContext& cc, int graph, int64_t step) {
  REMAT_CHECK(graph >= 0 && static_cast<size_t>(graph) < execs_.size() &&
                  execs_[static_cast<size_t>(graph)],
              "no CUDA graph " << graph << " to replay");
  REMAT_CHECK(!cc.capturing, "replay while a capture is open");
  // From pageable memory: the call returns once `value` is staged, so it may go out of scope.
  const uint64_t value = static_cast<uint64_t>(step);
  REMAT_CUDA_CHECK(cudaMemcpyAsync(step_device_, &value, sizeof(value), cudaMemcpyHostToDevice,
                                   cc.stream));
  const cudaError_t e = cudaGraphLaunch(execs_[static_cast<size_t>(graph)], cc.stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // a launch that failed leaves no error for the next call to find
    REMAT_FAIL("cudaGraphLaunch of CUDA graph " << graph << ": " << cudaGetErrorString(e));
  }
}

void CudaGraphs::drop(int graph) {
  if (graph < 0 || static_cast<size_t>(graph) >= execs_.size()) return;
  cudaGraphExec_t& x = execs_[static_cast<size_t>(graph)];
  if (x) (void)cudaGraphExecDestroy(x);
  x = nullptr;
}

}  // namespace remat

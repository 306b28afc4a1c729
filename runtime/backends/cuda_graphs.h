// The CUDA backend's records of captured launches (Note [step graphs] in backend.h): capture on
// the backend's stream, instantiate, replay after writing the step into the device copy the
// captured kernels read (Note [step source] in kernels/rng.h). Built only with CUDA.
#pragma once
#ifdef REMAT_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace remat {

struct CudaContext;

class CudaGraphs {
 public:
  CudaGraphs() = default;
  ~CudaGraphs();  // destroys every record and the step's device copy; never throws
  CudaGraphs(const CudaGraphs&) = delete;
  CudaGraphs& operator=(const CudaGraphs&) = delete;

  // Allocates the step's device copy (at the backend's start, before any budget's memory).
  void init();
  // Starts capturing cc.stream (this thread's calls only: a data-loading thread may allocate
  // pinned memory meanwhile) and sets cc.capturing and cc.step_device.
  void begin(CudaContext& cc);
  // Ends the capture: a handle, or -1 with `why` (the capture was invalidated by a call that
  // waits for the host, or instantiation failed).
  int end(CudaContext& cc, std::string* why, int64_t* launches);
  // Ends a capture a failed call left open, discarding it and the error it left.
  void abort(CudaContext& cc);
  // Writes `step` to the device copy, then launches record `graph`, both on cc.stream.
  void replay(const CudaContext& cc, int graph, int64_t step);
  void drop(int graph);

 private:
  std::vector<cudaGraphExec_t> execs_;  // null where dropped
  uint64_t* step_device_ = nullptr;     // 8 bytes (Note [step source])
};

}  // namespace remat

#endif  // REMAT_HAVE_CUDA

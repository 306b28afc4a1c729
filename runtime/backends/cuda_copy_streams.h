// The CUDA backend's copy streams (Note [copy streams] in backend.h): one non-blocking stream
// each way, and an event per queued copy. Built only with CUDA.
#pragma once
#ifdef REMAT_HAVE_CUDA

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

namespace remat {

class CudaCopyStreams {
 public:
  CudaCopyStreams() = default;
  ~CudaCopyStreams();  // waits for the copies, destroys the streams and events; never throws
  CudaCopyStreams(const CudaCopyStreams&) = delete;
  CudaCopyStreams& operator=(const CudaCopyStreams&) = delete;

  // Queues a copy on stream `dir` (0 to host, 1 to the device) after what `compute` has been
  // given so far; returns its ticket. The streams are created at the first copy.
  int64_t queue(cudaStream_t compute, int dir, void* dst, const void* src, int64_t bytes);
  // `compute` waits for copy `ticket` (nothing when it is known to be done).
  void wait(cudaStream_t compute, int64_t ticket);
  // Waits on the host for every copy; every ticket given so far is then done.
  void synchronize();

 private:
  cudaEvent_t event_of(int64_t ticket);  // null when the ticket is done

  std::array<cudaStream_t, 2> streams_{};
  cudaEvent_t compute_point_ = nullptr;  // re-recorded on the compute stream at each queue
  std::vector<cudaEvent_t> events_;      // events_[t - first_live_]: ticket t's end
  int64_t first_live_ = 1;               // tickets below it are done
  int64_t next_ = 1;
};

}  // namespace remat

#endif  // REMAT_HAVE_CUDA

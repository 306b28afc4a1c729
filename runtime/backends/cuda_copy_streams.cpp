// CudaCopyStreams: a plan's copies on their own streams, ordered by events (Note [copy
// streams] in backend.h).
#include "runtime/backends/cuda_copy_streams.h"

#include "runtime/backends/cuda_context.h"
#include "runtime/core/check.h"

namespace remat {

CudaCopyStreams::~CudaCopyStreams() {
  for (cudaStream_t s : streams_)
    if (s) (void)cudaStreamSynchronize(s);
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  if (compute_point_) (void)cudaEventDestroy(compute_point_);
  for (cudaStream_t s : streams_)
    if (s) (void)cudaStreamDestroy(s);
}

cudaEvent_t CudaCopyStreams::event_of(int64_t ticket) {
  if (ticket < first_live_) return nullptr;
  REMAT_CHECK(ticket < next_, "copy ticket " << ticket << " was never given");
  return events_[static_cast<size_t>(ticket - first_live_)];
}

int64_t CudaCopyStreams::queue(cudaStream_t compute, int dir, void* dst, const void* src,
                               int64_t bytes) {
  REMAT_CHECK(dir == 0 || dir == 1, "copy direction " << dir);
  cudaStream_t& stream = streams_[static_cast<size_t>(dir)];
  if (!stream) REMAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!compute_point_)
    REMAT_CUDA_CHECK(cudaEventCreateWithFlags(&compute_point_, cudaEventDisableTiming));
  // The copy starts after the computes issued so far: they wrote what an offload reads, and
  // were the last to use the memory a prefetch writes.
  REMAT_CUDA_CHECK(cudaEventRecord(compute_point_, compute));
  REMAT_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_point_, 0));
  if (bytes > 0)
    REMAT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                     dir == 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                     stream));
  const size_t slot = static_cast<size_t>(next_ - first_live_);
  if (slot == events_.size()) {
    events_.push_back(nullptr);
    REMAT_CUDA_CHECK(cudaEventCreateWithFlags(&events_.back(), cudaEventDisableTiming));
  }
  REMAT_CUDA_CHECK(cudaEventRecord(events_[slot], stream));
  return next_++;
}

void CudaCopyStreams::wait(cudaStream_t compute, int64_t ticket) {
  if (cudaEvent_t e = event_of(ticket)) REMAT_CUDA_CHECK(cudaStreamWaitEvent(compute, e, 0));
}

void CudaCopyStreams::synchronize() {
  for (cudaStream_t s : streams_)
    if (s) REMAT_CUDA_CHECK(cudaStreamSynchronize(s));
  first_live_ = next_;  // the events are reused from slot 0
}

}  // namespace remat

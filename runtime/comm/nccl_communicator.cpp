// NcclCommunicator: the Communicator over NCCL on device memory. Collectives go on the
// communicator's own stream, after an event on the backend's compute stream; wait() makes the
// compute stream wait on the collective's completion event (Note [collective order]).
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/comm/communicator.h"
#include "runtime/backends/cuda_context.h"

#define REMAT_NCCL_CHECK(expr)                                                          \
  do {                                                                                  \
    ncclResult_t remat_n_ = (expr);                                                     \
    if (remat_n_ != ncclSuccess)                                                        \
      ::remat::detail::throw_check(#expr, std::string("NCCL error: ") +                \
                                              ncclGetErrorString(remat_n_),            \
                                   __FILE__, __LINE__);                                 \
  } while (0)

namespace remat {

bool nccl_built() { return true; }

namespace {

ncclDataType_t nccl_type(CommType t) { return t == CommType::F64 ? ncclFloat64 : ncclFloat32; }
ncclRedOp_t nccl_op(CommOp op) { return op == CommOp::Avg ? ncclAvg : ncclSum; }

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(CudaContext* cc, Communicator* bootstrap) : cc_(cc) {
    if (bootstrap) {
      REMAT_CHECK(bootstrap->memory() == DeviceKind::Cpu,
                  "NCCL's unique id is bootstrapped over a host-memory communicator");
      rank_ = bootstrap->rank();
      size_ = bootstrap->size();
    }
    ncclUniqueId id;
    if (rank_ == 0) REMAT_NCCL_CHECK(ncclGetUniqueId(&id));
    if (bootstrap) bootstrap->broadcast_now(&id, sizeof id, 0);
    REMAT_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    REMAT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    REMAT_CUDA_CHECK(cudaMalloc(&barrier_word_, sizeof(float)));
  }
  ~NcclCommunicator() override {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    for (auto& [h, e] : pending_) free_events_.push_back(e);
    for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
    if (barrier_word_) (void)cudaFree(barrier_word_);
    if (comm_) (void)ncclCommDestroy(comm_);
    if (stream_) (void)cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  DeviceKind memory() const override { return DeviceKind::Cuda; }

  CommHandle all_reduce(void* buf, int64_t count, CommType t, CommOp op) override {
    after_compute();
    REMAT_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(count), nccl_type(t), nccl_op(op),
                                   comm_, stream_));
    return finish();
  }
  CommHandle reduce_scatter(void* buf, int64_t count, CommType t, CommOp op) override {
    after_compute();
    char* mine = static_cast<char*>(buf) + rank_ * count * comm_type_size(t);
    REMAT_NCCL_CHECK(ncclReduceScatter(buf, mine, static_cast<size_t>(count), nccl_type(t),
                                       nccl_op(op), comm_, stream_));
    return finish();
  }
  CommHandle all_gather(void* buf, int64_t bytes) override {
    after_compute();
    const char* mine = static_cast<const char*>(buf) + rank_ * bytes;
    REMAT_NCCL_CHECK(
        ncclAllGather(mine, buf, static_cast<size_t>(bytes), ncclUint8, comm_, stream_));
    return finish();
  }
  CommHandle broadcast(void* buf, int64_t bytes, int root) override {
    after_compute();
    REMAT_NCCL_CHECK(
        ncclBroadcast(buf, buf, static_cast<size_t>(bytes), ncclUint8, root, comm_, stream_));
    return finish();
  }

  void wait(CommHandle h) override {
    auto it = pending_.find(h);
    REMAT_CHECK(it != pending_.end(), "wait on unknown or finished collective " << h);
    REMAT_CUDA_CHECK(cudaStreamWaitEvent(cc_->stream, it->second, 0));
    free_events_.push_back(it->second);
    pending_.erase(it);
  }

  void barrier() override {
    REMAT_NCCL_CHECK(
        ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, comm_, stream_));
    REMAT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  cudaEvent_t event() {
    if (free_events_.empty()) {
      cudaEvent_t e = nullptr;
      REMAT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      return e;
    }
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  // The collective reads what the compute stream wrote before it was started.
  void after_compute() {
    cudaEvent_t e = event();
    REMAT_CUDA_CHECK(cudaEventRecord(e, cc_->stream));
    REMAT_CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
    free_events_.push_back(e);  // the wait has captured it; it may be recorded again
  }
  CommHandle finish() {
    cudaEvent_t e = event();
    REMAT_CUDA_CHECK(cudaEventRecord(e, stream_));
    const CommHandle h = next_++;
    pending_.emplace(h, e);
    return h;
  }

  CudaContext* cc_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* barrier_word_ = nullptr;  // 4 bytes of device memory for barrier()
  CommHandle next_ = 1;
  std::map<CommHandle, cudaEvent_t> pending_;  // completion event per outstanding collective
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Backend& cuda, Communicator* bootstrap,
                                                     std::string* why) {
  if (cuda.kind() != DeviceKind::Cuda || !cuda.device_context()) {
    if (why) *why = "NCCL needs the CUDA backend (got '" + cuda.name() + "')";
    return nullptr;
  }
  return std::make_unique<NcclCommunicator>(static_cast<CudaContext*>(cuda.device_context()),
                                            bootstrap);
}

}  // namespace remat

// MpiCommunicator: the Communicator over MPI's non-blocking collectives on host memory
// (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast), all in place.
#include "runtime/comm/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstring>
#include <map>
#include <vector>

#include "runtime/core/check.h"

namespace remat {

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  REMAT_FAIL(call << " failed: " << std::string(text, static_cast<size_t>(len)));
}

namespace {

MPI_Datatype mpi_type(CommType t) { return t == CommType::F64 ? MPI_DOUBLE : MPI_FLOAT; }

// Largest element count one MPI call takes (its counts are int); bigger buffers go in pieces.
constexpr int64_t kMaxCount = int64_t{1} << 30;

int to_int_count(int64_t n, const char* what) {
  REMAT_CHECK(n >= 0 && n <= INT_MAX, what << ": " << n << " elements exceed MPI's int counts");
  return static_cast<int>(n);
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    // Outstanding operations are abandoned only when the job is ending on an error.
    for (auto& [h, p] : pending_)
      for (MPI_Request& r : p.requests)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  DeviceKind memory() const override { return DeviceKind::Cpu; }

  CommHandle all_reduce(void* buf, int64_t count, CommType t, CommOp op) override {
    Pending p;
    const int64_t esize = comm_type_size(t);
    for (int64_t done = 0; done < count; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, count - done));
      p.requests.emplace_back();
      mpi_check(MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(buf) + done * esize, n,
                               mpi_type(t), MPI_SUM, comm_, &p.requests.back()),
                "MPI_Iallreduce");
    }
    if (op == CommOp::Avg) p.scale = {buf, count, t};
    return add(std::move(p));
  }

  CommHandle reduce_scatter(void* buf, int64_t count, CommType t, CommOp op) override {
    Pending p;
    p.requests.emplace_back();
    mpi_check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, to_int_count(count, "reduce_scatter"),
                                        mpi_type(t), MPI_SUM, comm_, &p.requests.back()),
              "MPI_Ireduce_scatter_block");
    // In place, MPI leaves this rank's result at the start of buf: move it to its block.
    const int64_t bytes = count * comm_type_size(t);
    char* base = static_cast<char*>(buf);
    if (rank_ > 0) p.move = {base + rank_ * bytes, base, bytes};
    if (op == CommOp::Avg) p.scale = {base + rank_ * bytes, count, t};
    return add(std::move(p));
  }

  CommHandle all_gather(void* buf, int64_t bytes) override {
    Pending p;
    p.requests.emplace_back();
    mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                             to_int_count(bytes, "all_gather"), MPI_BYTE, comm_,
                             &p.requests.back()),
              "MPI_Iallgather");
    return add(std::move(p));
  }

  CommHandle broadcast(void* buf, int64_t bytes, int root) override {
    Pending p;
    for (int64_t done = 0; done < bytes; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, bytes - done));
      p.requests.emplace_back();
      mpi_check(MPI_Ibcast(static_cast<char*>(buf) + done, n, MPI_BYTE, root, comm_,
                           &p.requests.back()),
                "MPI_Ibcast");
    }
    return add(std::move(p));
  }

  void wait(CommHandle h) override {
    auto it = pending_.find(h);
    REMAT_CHECK(it != pending_.end(), "wait on unknown or finished collective " << h);
    Pending p = std::move(it->second);
    pending_.erase(it);
    mpi_check(MPI_Waitall(static_cast<int>(p.requests.size()), p.requests.data(),
                          MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    if (p.move.bytes > 0) std::memmove(p.move.dst, p.move.src, static_cast<size_t>(p.move.bytes));
    if (p.scale.count > 0) {
      if (p.scale.type == CommType::F64) divide(static_cast<double*>(p.scale.buf), p.scale.count);
      else divide(static_cast<float*>(p.scale.buf), p.scale.count);
    }
  }

  void progress() override {
    // Testing one outstanding request runs MPI's progress engine for all of them.
    for (auto& [h, p] : pending_)
      for (MPI_Request& r : p.requests) {
        if (r == MPI_REQUEST_NULL) continue;
        int done = 0;
        mpi_check(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test");
        return;
      }
  }

  void barrier() override { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  struct Move {
    void* dst = nullptr;
    const void* src = nullptr;
    int64_t bytes = 0;
  };
  struct Scale {
    void* buf = nullptr;
    int64_t count = 0;
    CommType type = CommType::F32;
  };
  struct Pending {
    std::vector<MPI_Request> requests;
    Move move;    // after completion (in-place reduce-scatter)
    Scale scale;  // after completion: divide by size() (CommOp::Avg)
  };

  template <typename T>
  void divide(T* x, int64_t n) const {
    const T w = static_cast<T>(size_);
    for (int64_t i = 0; i < n; ++i) x[i] /= w;
  }

  CommHandle add(Pending p) {
    const CommHandle h = next_++;
    pending_.emplace(h, std::move(p));
    return h;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  CommHandle next_ = 1;
  std::map<CommHandle, Pending> pending_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator_over_world() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace remat

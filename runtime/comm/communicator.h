// The Communicator interface: collectives among the ranks of a data-parallel job, beside
// Backend. MPI implementation for host memory (mpi_communicator.cpp), NCCL for device memory
// (nccl_communicator.cpp); each is built only when its library was found. See Note [collective
// order] for the one rule every caller keeps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"

namespace remat {

// Note [collective order]
// Every rank issues the same collectives on a communicator in the same order (the ranks run
// the same plan, so they do). Collectives are non-blocking: each returns a handle, and wait()
// makes its result visible to what runs next on this rank (MPI: the host, after MPI_Wait;
// NCCL: the backend's compute stream, through an event — the host does not block). Buffers
// are in place and must not be touched between the start and the wait. A rank that fails
// never leaves the others waiting: train ends the whole job (MPI_Abort) on any error.

enum class CommType { F32, F64 };
enum class CommOp { Sum, Avg };  // Avg: the sum divided by size()
inline int64_t comm_type_size(CommType t) { return t == CommType::F64 ? 8 : 4; }

using CommHandle = int64_t;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi", "nccl": for logs.
  virtual std::string name() const = 0;
  // Where buffers must live: Cpu (MPI: host memory) or Cuda (NCCL: device memory).
  virtual DeviceKind memory() const = 0;

  // buf[count] becomes the reduction of every rank's buf[count].
  virtual CommHandle all_reduce(void* buf, int64_t count, CommType t, CommOp op) = 0;
  // buf holds size() blocks of `count` elements; this rank's block (buf + rank * count) becomes
  // the reduction of every rank's block of that index. The other blocks become undefined.
  virtual CommHandle reduce_scatter(void* buf, int64_t count, CommType t, CommOp op) = 0;
  // buf holds size() blocks of `bytes`; every rank's block `rank` is copied to every rank.
  virtual CommHandle all_gather(void* buf, int64_t bytes) = 0;
  // buf[bytes] of rank `root` is copied to every rank.
  virtual CommHandle broadcast(void* buf, int64_t bytes, int root) = 0;
  // Completes the operation (Note [collective order]); a handle is waited for exactly once.
  virtual void wait(CommHandle h) = 0;
  // Lets outstanding operations advance while the caller computes (MPI's progress engine
  // only moves inside MPI calls); never blocks.
  virtual void progress() {}
  // Returns when every rank has called barrier() (blocks the host).
  virtual void barrier() = 0;

  // Blocking forms: start and wait.
  void all_reduce_now(void* buf, int64_t count, CommType t, CommOp op) {
    wait(all_reduce(buf, count, t, op));
  }
  void broadcast_now(void* buf, int64_t bytes, int root) { wait(broadcast(buf, bytes, root)); }
  void all_gather_now(void* buf, int64_t bytes) { wait(all_gather(buf, bytes)); }
};

// Host-memory helpers (blocking, collective): every rank's `value` by rank; rank `root`'s
// string on every rank.
std::vector<uint64_t> all_gather_u64(Communicator& c, uint64_t value);
std::string broadcast_string(Communicator& c, const std::string& s, int root);

// True when this binary has the MPI communicator / the NCCL communicator.
bool mpi_built();
bool nccl_built();

// A NCCL communicator (device memory) on the device of `cuda`, a CUDA backend, over the ranks
// of `bootstrap` (a host communicator: NCCL's unique id is broadcast through it; null for a
// job of one rank). Its collectives run on a stream of its own after the work already queued
// on the backend's stream; wait() makes the backend's stream wait, not the host. nullptr with
// `why` set when the build has no NCCL or `cuda` is not a CUDA backend.
std::unique_ptr<Communicator> make_nccl_communicator(Backend& cuda, Communicator* bootstrap,
                                                     std::string* why);

}  // namespace remat

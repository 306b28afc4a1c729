// Replica checksums, and checkpoints saved from / loaded into every rank of a data-parallel job.
#include "runtime/replica_state.h"

#include <cstring>
#include <iomanip>
#include <sstream>

#include "runtime/core/check.h"
#include "runtime/checkpoint.h"

namespace remat {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

uint64_t fnv1a(uint64_t h, const std::vector<char>& bytes) {
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * kFnvPrime;
  return h;
}

std::vector<char> region_bytes(const Executor& ex, int64_t offset, int64_t bytes) {
  std::vector<char> out(static_cast<size_t>(bytes));
  if (bytes > 0) ex.read_region(offset, bytes, out.data());
  return out;
}

bool sharded(const Executor& ex) {
  const PersistentLayout& L = ex.layout();
  return L.parallel.active() && L.parallel.shard_optimizer;
}

// Per optimizer-state kind, the flat block one process would hold, rebuilt from every rank's
// shard block (Note [gradient buckets]).
std::vector<std::vector<char>> gather_state_blocks(const Executor& ex, Communicator& host) {
  const PersistentLayout& L = ex.layout();
  const int world = L.parallel.world;
  const int64_t blk = L.state_block_bytes;
  std::vector<std::vector<char>> flat;
  for (int64_t k = 0; k < L.state_kinds; ++k) {
    std::vector<char> all(static_cast<size_t>(blk * world));
    if (blk > 0) ex.read_region(L.state_begin[static_cast<size_t>(k)], blk, all.data() + host.rank() * blk);
    host.all_gather_now(all.data(), blk);
    std::vector<char> f(static_cast<size_t>(L.flat_bytes));
    for (size_t b = 0; b < L.buckets.size(); ++b)
      for (int r = 0; r < world; ++r)
        std::memcpy(f.data() + L.shard_begin(b, r), all.data() + r * blk + L.shard_state_offset(b),
                    static_cast<size_t>(L.shard_bytes(b)));
    flat.push_back(std::move(f));
  }
  return flat;
}

// For each optimizer-state value: its parameter and state kind (from the Update nodes).
struct StateOf {
  ValueId param = kNoValue;
  int64_t kind = -1;
};
std::vector<StateOf> state_owners(const Graph& g) {
  std::vector<StateOf> out(g.values.size());
  for (const Node& u : g.nodes)
    if (u.kind == NodeKind::Update)
      for (size_t k = 2; k < u.inputs.size(); ++k)
        if (g.value(u.inputs[k]).kind == ValueKind::OptState)  // not a clip node's inputs
          out[static_cast<size_t>(u.inputs[k])] = {u.inputs[0], static_cast<int64_t>(k) - 2};
  return out;
}

}  // namespace

uint64_t replica_checksum(const Executor& ex) {
  const Graph& g = ex.graph();
  const PersistentLayout& L = ex.layout();
  uint64_t h = kFnvOffset;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!checkpoint_holds(val.kind) || L.offset[v] < 0) continue;  // sharded state differs
    h = fnv1a(h, region_bytes(ex, L.offset[v], val.desc.bytes()));
  }
  return h;
}

void check_replicas_identical(const Executor& ex, Communicator& host, const std::string& when) {
  const std::vector<uint64_t> sums = all_gather_u64(host, replica_checksum(ex));
  std::ostringstream bad;
  for (size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0])
      bad << " rank " << r << " 0x" << std::hex << std::setw(16) << std::setfill('0') << sums[r]
          << std::dec << ";";
  if (!bad.str().empty()) {
    std::ostringstream os;
    os << "the ranks' weights differ " << when << ": rank 0 has checksum 0x" << std::hex
       << std::setw(16) << std::setfill('0') << sums[0] << std::dec << "," << bad.str()
       << " the ranks no longer train the same model";
    REMAT_FAIL(os.str());
  }
}

void checkpoint_save_replicas(const Executor& ex, Communicator& host, const std::string& path,
                              int64_t steps_done) {
  const Graph& g = ex.graph();
  std::vector<std::vector<char>> flat;
  if (sharded(ex)) flat = gather_state_blocks(ex, host);
  if (host.rank() == 0) {
    const std::vector<StateOf> owner = state_owners(g);
    const PersistentLayout& L = ex.layout();
    checkpoint_save(
        g,
        [&](ValueId v) {
          const Value& val = g.value(v);
          if (L.offset[static_cast<size_t>(v)] >= 0) return ex.read(v);
          const StateOf& o = owner[static_cast<size_t>(v)];
          REMAT_CHECK(val.kind == ValueKind::OptState && o.kind >= 0,
                      "value '" << val.name << "' is held by no rank");
          std::vector<float> out(static_cast<size_t>(val.desc.numel()));
          const int64_t pos = L.offset[static_cast<size_t>(o.param)] - L.params_begin;
          std::memcpy(out.data(), flat[static_cast<size_t>(o.kind)].data() + pos,
                      static_cast<size_t>(val.desc.bytes()));
          return out;
        },
        path, steps_done);
  }
  host.barrier();  // every rank ends the run once the file is written
}

CheckpointInfo checkpoint_load_replicas(Executor& ex, Communicator& host, const std::string& path) {
  const Graph& g = ex.graph();
  CheckpointData d;
  if (host.rank() == 0) d = checkpoint_read(g, path);  // throws before any rank is written
  // The precision travels as 0 (not recorded), 1 (fp32), 2 (bf16).
  int64_t head[3] = {d.step, d.unverified,
                     d.precision.empty() ? 0 : d.precision == "bf16" ? 2 : 1};
  host.broadcast_now(head, sizeof head, 0);
  d.step = head[0];
  d.unverified = static_cast<int>(head[1]);
  d.precision = head[2] == 0 ? "" : head[2] == 2 ? "bf16" : "fp32";
  d.values.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (!checkpoint_holds(val.kind)) continue;
    d.values[v].resize(static_cast<size_t>(val.desc.numel()));
    host.broadcast_now(d.values[v].data(), val.desc.bytes(), 0);
    if (ex.layout().offset[v] >= 0) ex.write(static_cast<ValueId>(v), d.values[v]);
  }
  if (sharded(ex)) {  // this rank's shards of the optimizer state
    for (const UpdateSlice& s : ex.layout().slices) {
      const Node& u = g.node(s.update);
      for (size_t k = 0; k < s.state_offsets.size(); ++k)
        ex.write_region(s.state_offsets[k], s.desc.bytes(),
                        d.values[static_cast<size_t>(u.inputs[k + 2])].data() + s.first);
    }
  }
  return CheckpointInfo{d.step, d.unverified, d.precision};
}

}  // namespace remat

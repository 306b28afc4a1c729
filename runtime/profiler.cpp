// profile_graph(): runs each node alone on the backend with freshly filled buffers and
// records the median time of its repeats; plus the cache path of a measured table.
#include "runtime/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "runtime/core/bf16.h"
#include "runtime/core/check.h"

namespace remat {

namespace {

// Buffers of one node's measurement, freed when it goes out of scope (also on errors).
class NodeBuffers {
 public:
  NodeBuffers(Backend& be, std::string who) : be_(be), who_(std::move(who)) {}
  ~NodeBuffers() {
    for (void* p : ptrs_) be_.raw_free(p);
  }
  NodeBuffers(const NodeBuffers&) = delete;
  NodeBuffers& operator=(const NodeBuffers&) = delete;
  void* alloc(int64_t bytes) {
    ptrs_.push_back(nullptr);
    ptrs_.back() = backend_alloc(be_, bytes, who_);
    return ptrs_.back();
  }

 private:
  Backend& be_;
  std::string who_;  // "profiling node 'conv1'", in front of an allocation failure
  std::vector<void*> ptrs_;
};

constexpr int64_t kFillBlock = int64_t{1} << 20;  // random elements drawn per float input

// Valid contents for input `v` of `node`: indices below the op's bound (OpDef::index_bound;
// otherwise labels in [0, classes), classes = dim 1 of the first input), positive buffers
// (running variances must be), other floats in [-1, 1].
void fill_input(Backend& be, const Graph& g, const Node& node, const OpDef& op, ValueId v,
                void* dst, std::mt19937_64& rng) {
  const Value& val = g.value(v);
  const int64_t n = val.desc.numel();
  if (val.desc.dtype == DType::I32) {
    int64_t classes = 1;
    const TensorDesc& first = g.value(node.inputs.at(0)).desc;
    if (first.dtype == DType::F32 && first.shape.size() >= 2) classes = first.shape[1];
    if (op.index_bound) {
      std::vector<TensorDesc> in;
      for (ValueId u : node.inputs) in.push_back(g.value(u).desc);
      int index = 0;
      while (node.inputs[static_cast<size_t>(index)] != v) ++index;
      classes = op.index_bound(*node.typed, in, index);
    }
    std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(std::max<int64_t>(classes, 1) - 1));
    std::vector<int32_t> host(static_cast<size_t>(n));
    for (auto& x : host) x = d(rng);
    be.copy_from_host(dst, host.data(), val.desc.bytes());
    return;
  }
  // Floats: one block of random values (bf16-rounded for a BF16 value), uploaded once and
  // repeated on the device by doubling copies. Drawing every element on the host took about a
  // second per node of VGG19 at batch 64 on an H100 machine; the timings do not depend on
  // the values beyond their range.
  const bool positive = val.kind == ValueKind::Buffer;
  std::uniform_real_distribution<float> d(positive ? 0.5f : -1.0f, positive ? 1.5f : 1.0f);
  const int64_t block = std::min<int64_t>(n, kFillBlock);
  std::vector<float> host(static_cast<size_t>(block));
  for (auto& x : host) x = d(rng);
  const int64_t elem = dtype_size(val.desc.dtype);
  if (val.desc.dtype == DType::BF16) {
    std::vector<uint16_t> narrow(host.size());
    bf16_narrow(host.data(), narrow.data(), block);
    be.copy_from_host(dst, narrow.data(), block * elem);
  } else {
    be.copy_from_host(dst, host.data(), block * elem);
  }
  auto* bytes = static_cast<char*>(dst);
  for (int64_t filled = block; filled < n;) {
    const int64_t more = std::min(filled, n - filled);
    be.copy(bytes + filled * elem, bytes, more * elem);
    filled += more;
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

NodeCost profile_node(const Graph& g, NodeId id, const OpDef& op, Backend& be,
                      const ProfileOptions& opt, std::mt19937_64& rng) {
  const Node& node = g.node(id);
  const Value& out = g.value(node.output);
  NodeBuffers bufs(be, "profiling node '" + node.name + "'");
  std::map<ValueId, void*> ptr;  // a value read twice (add(x, x)) gets one buffer
  ExecContext ctx;
  ctx.node = &node;
  for (ValueId v : node.inputs) {
    auto it = ptr.find(v);
    if (it == ptr.end()) {
      it = ptr.emplace(v, bufs.alloc(g.value(v).desc.bytes())).first;
      fill_input(be, g, node, op, v, it->second, rng);
    }
    ctx.inputs.push_back(TensorView{&g.value(v).desc, it->second});
  }
  REMAT_CHECK(!ptr.count(node.output), "node '" << node.name << "' writes one of its inputs");
  void* out_ptr = bufs.alloc(out.desc.bytes());
  be.fill_zero(out_ptr, out.desc.bytes());
  ctx.output = TensorView{&out.desc, out_ptr};

  NodeCost c;
  c.name = node.name;
  c.bytes = out.kind == ValueKind::Activation ? out.desc.bytes() : 0;
  c.workspace_bytes = be.workspace_bytes(op, ctx);
  ctx.workspace_bytes = c.workspace_bytes;
  ctx.workspace = c.workspace_bytes > 0 ? bufs.alloc(c.workspace_bytes) : nullptr;
  std::vector<double> ms = be.time_run(op, ctx, opt.warmup, opt.repeats);
  be.synchronize();
  REMAT_CHECK(!ms.empty(), "backend returned no timings");
  c.cost = median_of(ms);
  const auto [lo, hi] = std::minmax_element(ms.begin(), ms.end());
  c.spread = c.cost > 0 ? (*hi - *lo) / c.cost : 0;
  return c;
}

std::string sanitize_file_name(const std::string& s) {
  std::string r = s;
  for (char& ch : r) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
    if (!ok) ch = '_';
  }
  return r;
}

}  // namespace

CostTable profile_graph(const Graph& g, const OpRegistry& ops, Backend& be,
                        const ProfileOptions& opt) {
  REMAT_CHECK(opt.repeats >= 1 && opt.warmup >= 0,
              "profile: repeats must be >= 1 and warmup >= 0 (got " << opt.repeats << ", "
                                                                     << opt.warmup << ")");
  CostTable t;
  t.model = g.name;
  t.device = be.name();
  t.unit = "ms";
  t.batch = g.batch;
  std::vector<NodeId> todo;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].kind != NodeKind::Update) todo.push_back(static_cast<NodeId>(n));
  std::mt19937_64 rng(opt.seed);
  for (size_t i = 0; i < todo.size(); ++i) {
    const Node& node = g.node(todo[i]);
    try {
      t.nodes.push_back(profile_node(g, todo[i], ops.get(node.op), be, opt, rng));
    } catch (const UserError&) {
      throw;
    } catch (const Error& e) {
      throw Error("profiling node '" + node.name + "' (op " + node.op + ") on " + be.name() +
                  ": " + e.what());
    }
    if (opt.on_node) opt.on_node(i, todo.size(), t.nodes.back());
  }
  t.link = measure_link(be, opt.link_bytes, opt.repeats);
  return t;
}

LinkCost measure_link(Backend& be, int64_t bytes, int repeats) {
  REMAT_CHECK(bytes > 0 && repeats >= 1, "measure_link: bytes " << bytes << ", repeats " << repeats);
  NodeBuffers device(be, "measuring the host link");
  void* dev = device.alloc(bytes);
  be.fill_zero(dev, bytes);
  struct Host {
    Backend& be;
    void* p;
    ~Host() { be.host_free(p); }
  } host{be, backend_alloc(be, bytes, "measuring the host link", /*host=*/true)};
  auto rate = [&](bool to_host) {
    std::vector<double> seconds;
    for (int k = 0; k <= repeats; ++k) {  // the first is untimed
      const auto t0 = std::chrono::steady_clock::now();
      if (to_host)
        be.copy_to_host(host.p, dev, bytes);
      else
        be.copy_from_host(dev, host.p, bytes);
      be.synchronize();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (k > 0) seconds.push_back(s);
    }
    return double(bytes) / std::max(median_of(seconds), 1e-9);
  };
  LinkCost l;
  l.bytes = bytes;
  l.to_host_bytes_per_second = rate(true);
  l.from_host_bytes_per_second = rate(false);
  return l;
}

bool costs_match_graph(const CostTable& t, const Graph& g, std::string* why) {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  size_t i = 0;
  for (const Node& node : g.nodes) {
    if (node.kind == NodeKind::Update) continue;
    if (i >= t.nodes.size())
      return fail("the cost table has " + std::to_string(t.nodes.size()) +
                  " entries but the graph has more nodes (first missing: '" + node.name + "')");
    const NodeCost& c = t.nodes[i++];
    if (c.name != node.name)
      return fail("entry " + std::to_string(i - 1) + " is '" + c.name + "' but the graph's node is '" +
                  node.name + "'");
    const Value& out = g.value(node.output);
    const int64_t bytes = out.kind == ValueKind::Activation ? out.desc.bytes() : 0;
    if (c.bytes != bytes)
      return fail("node '" + node.name + "': the table says " + std::to_string(c.bytes) +
                  " output bytes, the graph " + std::to_string(bytes));
  }
  if (i != t.nodes.size())
    return fail("the cost table has " + std::to_string(t.nodes.size()) + " entries, the graph " +
                std::to_string(i) + " non-update nodes");
  return true;
}

std::string profile_cache_path(const std::string& model, int64_t batch,
                               const std::string& device_name) {
  std::string dir;
  if (const char* d = std::getenv("REMAT_CACHE_DIR"); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    dir = std::string(x) + "/remat";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::string(h) + "/.cache/remat";
  } else {
    dir = ".remat-cache";
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir + "/" + sanitize_file_name(model + "-b" + std::to_string(batch) + "-" + device_name) +
         ".json";
}

std::string profile_cache_key(const Graph& g) {
  const Shape& s = g.value(g.input).desc.shape;  // [N, C, H, W]
  std::string k = g.name + "-";
  for (size_t i = 1; i < s.size(); ++i) k += (i > 1 ? "x" : "") + std::to_string(s[i]);
  // A bf16 graph has other nodes (casts) and other timings, an accumulating one other nodes
  // (grad_accumulate), a channels-last one other nodes and kernels: cached apart.
  if (g.micro_batches > 1) k += "-accumulate";
  // A channels-last graph (Note [channels-last layout]) has other nodes and other kernels.
  for (const Node& n : g.nodes)
    if (n.attrs.has("data_format")) {
      k += "-channels-last";
      break;
    }
  for (const Value& v : g.values)
    if (v.desc.dtype == DType::BF16) return k + "-bf16";
  return k;
}

CostTable profile_graph_cached(const Graph& g, const OpRegistry& ops, Backend& be,
                               const ProfileOptions& opt, bool refresh, std::string* note) {
  const std::string cache = profile_cache_path(profile_cache_key(g), g.batch, be.name());
  std::string why;
  if (!refresh && std::filesystem::exists(cache)) {
    try {
      CostTable t = costs_load(cache);
      if (t.unit == "ms" && costs_match_graph(t, g, &why)) {
        if (note) *note = "using cached measurements from " + cache;
        if (!t.link.measured()) t.link = measure_link(be, opt.link_bytes, opt.repeats);
        return t;
      }
      if (why.empty()) why = "its unit is not ms";
    } catch (const UserError& e) {
      why = e.what();
    }
  }
  CostTable t = profile_graph(g, ops, be, opt);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cache).parent_path(), ec);
  try {
    costs_save(t, cache);
    if (note) *note = (why.empty() ? "" : "ignored stale cache (" + why + "); ") + "cached in " + cache;
  } catch (const UserError& e) {
    if (note) *note = std::string("not cached: ") + e.what();
  }
  return t;
}

}  // namespace remat

// loader_bench: can the image loader keep a step fed? For a model's input and batch and an image
// folder (or images it writes, --make N, of ImageNet's typical size), it times decode + augment
// (train crops: RandomResizedCrop + flip; --eval: resize + center crop) per decode-thread count,
// and, for each --step-ms, runs the prefetching loader against a step of that length (a sleep)
// and reports how long each step waited for its batch. Prints a table; with --json the rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/build.h"
#include "models/config.h"
#include "models/data.h"
#include "models/data_rng.h"
#include "models/images/image_decode.h"
#include "models/prefetch.h"
#include "ops/registry.h"
#include "runtime/core/check.h"
#include "runtime/io/atomic_file.h"
#include "tools/common/cli.h"

namespace remat {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& text, const std::string& flag, int64_t lo,
                                int64_t hi) {
  std::vector<int64_t> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < lo || x > hi)
      throw UsageError("loader_bench: --" + flag + ": '" + item + "' is not a number in [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    v.push_back(x);
  }
  if (v.empty()) throw UsageError("loader_bench: --" + flag + " is empty");
  return v;
}

// `count` JPEGs (quality 90) of about w x h in 10 class folders under `root`: smooth colour
// fields with edges and noise, so that they compress like photographs (ImageNet's average:
// about 400 x 350 pixels, 110 KB); a class's images share a tint, so a model can learn them.
int64_t make_images(const std::string& root, int64_t count, int64_t w, int64_t h, uint64_t seed) {
  int64_t bytes = 0;
  Rng rng(seed);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t iw = w * (80 + rng.below(41)) / 100, ih = h * (80 + rng.below(41)) / 100;
    std::vector<uint8_t> px(static_cast<size_t>(iw * ih * 3));
    double base[3], fx[3], fy[3];
    for (int c = 0; c < 3; ++c)
      base[c] = 50 + (i % 10 * 37 * (c + 1)) % 130 + rng.below(20), fx[c] = 0.005 + 0.05 * rng.uniform(), fy[c] = 0.005 + 0.05 * rng.uniform();
    const int64_t edge = iw / 4 + rng.below(iw / 2);
    for (int64_t y = 0; y < ih; ++y)
      for (int64_t x = 0; x < iw; ++x)
        for (int c = 0; c < 3; ++c) {
          const double v = base[c] + 50 * std::sin(fx[c] * x) * std::cos(fy[c] * y) +
                           (x < edge ? 30 : -30) + 12 * rng.normal();
          px[static_cast<size_t>((y * iw + x) * 3 + c)] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
        }
    const std::string dir = root + "/class" + std::to_string(i % 10);
    fs::create_directories(dir);
    const std::string jpeg = encode_jpeg(px.data(), iw, ih, 3, 90);
    write_file_atomic(dir + "/" + std::to_string(i) + ".jpg", jpeg);
    bytes += static_cast<int64_t>(jpeg.size());
  }
  return bytes;
}

int loader_bench_main(int argc, char** argv) {
  FlagParser f("loader_bench", "Decode + augment images/s per thread count, and whether a step of "
                               "a given length waits on the loader.");
  f.add("config", "FILE", "model YAML: its input size and batch (required)")
      .add("data", "DIR", "an image folder (root/<class>/<image>); with --make, where to write")
      .add("make", "N", "write N JPEGs into --data first (10 class folders)")
      .add("image-size", "WxH", "size of the images --make writes (+-20 %)", "500x375")
      .add("make-seed", "S", "seed of the images --make writes", "1")
      .add("batch", "N", "samples per batch (default the config's)")
      .add("threads", "LIST", "decode thread counts, e.g. 1,2,4 (default 1 .. the cores)")
      .add("batches", "N", "batches timed per thread count (after one untimed)", "4")
      .add("step-ms", "LIST", "step lengths to run the prefetching loader against, e.g. 50,100")
      .add("eval", "", "evaluation transforms (resize + center crop) instead of training crops")
      .add("json", "FILE", "write the rows as JSON")
      .allow_positional("KEY=VALUE", "override a config field");
  if (!f.parse(argc, argv)) return 0;
  for (const char* need : {"config", "data"})
    if (!f.has(need)) throw UsageError(std::string("loader_bench: --") + need + " is required\n" + f.usage());
  const std::string root = f.get("data");
  if (f.has("make")) {
    int64_t w = 0, h = 0;
    if (std::sscanf(f.get("image-size").c_str(), "%ldx%ld", &w, &h) != 2 || w < 8 || h < 8 ||
        w > 8192 || h > 8192)
      throw UsageError("loader_bench: --image-size: expected WxH such as 500x375, got '" +
                       f.get("image-size") + "'");
    const int64_t n = f.get_int("make", 10, 1000000);
    const auto t0 = Clock::now();
    const int64_t bytes =
        make_images(root, n, w, h, static_cast<uint64_t>(f.get_int("make-seed", 0, INT64_MAX)));
    std::printf("wrote %lld JPEGs of about %lldx%lld (mean %.0f KB) to %s in %.1f s\n",
                static_cast<long long>(n), static_cast<long long>(w), static_cast<long long>(h),
                bytes / 1e3 / n, root.c_str(),
                std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::vector<std::string> overrides = f.positional();
  overrides.push_back("data={source: folder, path: '" + fs::absolute(root).string() + "'}");
  const ModelConfig cfg = load_model_config(f.get("config"), overrides);
  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  if (f.has("batch")) bo.batch = f.get_int("batch", 1, 1 << 20);
  const Graph g = build_forward_graph(cfg, ops, bo);
  const TensorDesc& in = g.value(g.input).desc;
  const TensorDesc& lab = g.value(g.label).desc;
  const int64_t n = in.shape[0];
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<int64_t> threads;
  if (f.has("threads")) {
    threads = parse_list(f.get("threads"), "threads", 1, 1024);
  } else {
    for (int t = 1; t <= cores; ++t) threads.push_back(t);
  }
  const int64_t batches = f.get_int("batches", 1, 100000);
  std::vector<int64_t> step_ms;
  if (f.has("step-ms")) step_ms = parse_list(f.get("step-ms"), "step-ms", 1, 3600 * 1000);
  LoaderOptions lo;
  lo.evaluation = f.has("eval");

  std::vector<char> x(static_cast<size_t>(in.bytes())), y(static_cast<size_t>(lab.bytes()));
  std::printf("loader_bench: %s, input %s, batch %lld, %s crops, %d cores\n", cfg.name.c_str(),
              shape_str({in.shape[1], in.shape[2], in.shape[3]}).c_str(),
              static_cast<long long>(n), lo.evaluation ? "evaluation" : "training", cores);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%8s %10s %10s %12s", "threads", "images/s", "ms/batch", "per thread");
  for (int64_t ms : step_ms) std::printf("  wait@%lldms", static_cast<long long>(ms));
  std::printf("\n");
  for (int64_t t : threads) {
    lo.threads = static_cast<int>(t);
    auto src = make_data_source(cfg, in, lab, cfg.dir, {}, lo);
    src->next_batch(0, x.data(), reinterpret_cast<int32_t*>(y.data()));  // warm: files cached
    const auto t0 = Clock::now();
    for (int64_t b = 1; b <= batches; ++b) src->next_batch(b, x.data(), reinterpret_cast<int32_t*>(y.data()));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double rate = static_cast<double>(n * batches) / s;
    std::printf("%8lld %10.1f %10.1f %12.1f", static_cast<long long>(t), rate, 1e3 * s / batches,
                rate / t);
    nlohmann::json row = {{"threads", t}, {"images_per_s", rate}, {"ms_per_batch", 1e3 * s / batches}};
    for (int64_t ms : step_ms) {  // the loop train runs: acquire, then a step of `ms`
      PrefetchSource ahead(make_data_source(cfg, in, lab, cfg.dir, {}, lo), in.bytes(), lab.bytes());
      ahead.acquire(0);
      const double cold = ahead.wait_seconds();
      for (int64_t b = 1; b <= batches; ++b) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        ahead.acquire(b);
      }
      const double wait_ms = 1e3 * (ahead.wait_seconds() - cold) / batches;
      std::printf("  %9.1f", wait_ms);
      row["wait_ms_per_step_at_" + std::to_string(ms) + "ms"] = wait_ms;
    }
    std::printf("\n");
    std::fflush(stdout);
    rows.push_back(row);
  }
  if (!step_ms.empty())
    std::printf("wait@Nms: milliseconds each step of N ms waited for its batch (prefetch depth 2); "
                "0 means the loader kept up\n");
  if (f.has("json")) write_file_atomic(f.get("json"), rows.dump(2) + "\n");
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::loader_bench_main(argc, argv); });
}

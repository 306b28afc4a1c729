// `sample`: text from a trained token model, as nanoGPT's sample.py: load a checkpoint, start
// from a prompt, and append one token at a time — the logits of the last position, divided by
// the temperature, cut to the top k, sampled with a seeded generator (greedy at temperature 0).
// The forward graph runs with dropout off, at the model's sequence length T, all samples of the
// run as one batch; a context longer than T keeps its last T tokens. Under --budget its plan is
// solved like train's (forward only: the solver frees and recomputes activations to fit).
// Byte-level models (data source `text`) read and print bytes; others token ids.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/build.h"
#include "models/config.h"
#include "ops/registry.h"
#include "runtime/backends/backend.h"
#include "runtime/checkpoint.h"
#include "runtime/core/bf16.h"
#include "runtime/core/check.h"
#include "runtime/executor.h"
#include "solver/strategies.h"
#include "tools/common/cli.h"
#include "tools/training/step_plan.h"

namespace remat {
namespace {

// "1,2,3" or "1 2 3" -> ids, each in [0, vocab).
std::vector<int32_t> parse_token_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    char* end = nullptr;
    const long long v = std::strtoll(cur.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= vocab)
      throw UsageError("sample: --prompt-tokens: '" + cur + "' is not a token id in [0, " +
                       std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ') flush();
    else cur += c;
  }
  flush();
  return ids;
}

// The next token from one position's logits: argmax at temperature 0, else a draw from
// softmax(logits / temperature) over the top_k largest (all when top_k is 0 or >= V).
int32_t next_token(const std::vector<float>& logits, double temperature, int64_t top_k,
                   std::mt19937_64& rng) {
  const int64_t v = static_cast<int64_t>(logits.size());
  if (temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const int64_t k = top_k > 0 && top_k < v ? top_k : v;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[order[0]] / temperature;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[i] = std::exp(logits[order[i]] / temperature - top);
  double u = std::uniform_real_distribution<double>(0, sum)(rng);
  for (int64_t i = 0; i < k; ++i) {
    if (u < p[i]) return order[i];
    u -= p[i];
  }
  return order[k - 1];
}

int sample_main(int argc, char** argv) {
  FlagParser f("sample", "Generates tokens from a trained token model (as nanoGPT's sample.py).");
  f.add("config", "FILE", "model YAML of the checkpoint (a token model; required)")
      .add("checkpoint", "FILE", "a checkpoint from train --save (required)")
      .add("prompt", "TEXT", "the start, as bytes (byte-level models)", "\\n")
      .add("prompt-tokens", "IDS", "the start as token ids, e.g. 50256 or 1,2,3")
      .add("tokens", "N", "new tokens per sample", "100")
      .add("samples", "N", "samples, generated together as one batch", "1")
      .add("temperature", "T", "softmax temperature; 0 picks the most likely token", "0.8")
      .add("top-k", "K", "sample among the K most likely tokens (0: all)", "200")
      .add("seed", "S", "the sampler's seed", "1337")
      .add("seq", "T", "context length (default the config's sequence)")
      .add("device", "cpu|cuda", "where to run", "cpu")
      .add("budget", "BYTES", "memory budget of the forward pass (solved like train's)")
      .add("strategy", "S", "strategy under --budget", "checkmate")
      .add("time-limit", "SEC", "solver time limit", "60")
      .allow_positional("KEY=VALUE", "override a config field, as train took them");
  if (!f.parse(argc, argv)) return 0;
  for (const char* need : {"config", "checkpoint"})
    if (!f.has(need)) throw UsageError(std::string("sample: --") + need + " is required\n" + f.usage());
  if (f.has("prompt") && f.has("prompt-tokens"))
    throw UsageError("sample: --prompt and --prompt-tokens are exclusive");
  const int64_t new_tokens = f.get_int("tokens", 1, 1 << 24);
  const int64_t samples = f.get_int("samples", 1, 1 << 16);
  const double temperature = f.get_double("temperature", 0, 1e6);
  const int64_t top_k = f.get_int("top-k", 0, int64_t{1} << 31);
  std::mt19937_64 rng(static_cast<uint64_t>(f.get_int("seed", 0, INT64_MAX)));

  ModelConfig cfg = load_model_config(f.get("config"), f.positional());
  if (!cfg.tokens())
    REMAT_USER_ERROR(f.get("config") << ": not a token model (no `sequence`): sample generates "
                                        "tokens");
  for (LayerConfig& l : cfg.layers)  // inference: dropout off
    if (l.op == "dropout") l.attrs.set("rate", 0.0);
  const bool bytes = cfg.data.source == "text";
  std::vector<int32_t> prompt;
  if (f.has("prompt-tokens")) {
    prompt = parse_token_ids(f.get("prompt-tokens"), cfg.vocab);
  } else if (bytes) {
    std::string text = f.get("prompt");
    if (text == "\\n") text = "\n";
    for (unsigned char c : text) prompt.push_back(c);
  } else if (f.has("prompt")) {
    throw UsageError("sample: --prompt is text for byte-level models (data source `text`); this "
                     "model reads token ids: use --prompt-tokens");
  } else {
    prompt = {0};
  }
  if (prompt.empty()) throw UsageError("sample: the prompt is empty");

  const OpRegistry ops = make_builtin_registry();
  BuildOptions bo;
  bo.batch = samples;
  if (f.has("seq")) bo.sequence = f.get_int("seq", 1, 1 << 24);
  const Graph g = build_forward_graph(cfg, ops, bo);
  const int64_t t_len = g.value(g.input).desc.shape.at(1);
  const ValueId logits_v = g.node(g.value(g.loss).producer).inputs.at(0);
  const TensorDesc& logits_desc = g.value(logits_v).desc;  // [S, T, V]
  const int64_t vocab = logits_desc.shape.back();
  const CheckpointData ck = checkpoint_read(g, f.get("checkpoint"));

  std::unique_ptr<Backend> be;
  if (f.get_choice("device", {"cpu", "cuda"}) == "cpu") {
    be = make_cpu_backend();
  } else {
    std::string why;
    be = make_cuda_backend(0, &why);
    if (!be) REMAT_USER_ERROR("sample: --device cuda: " << why);
  }
  StepPlanOptions po;
  if (f.has("budget")) po.budget = f.get_bytes("budget");
  po.strategy = f.get_choice("strategy", strategy_names());
  po.time_limit = f.get_double("time-limit", 0.1, 1e6);
  po.log_level = 0;
  const StepPlan sp = make_step_plan(g, ops, *be, po, po.budget.value_or(0));
  be->end_setup();
  ExecutorOptions eo;
  if (po.budget) eo = ExecutorOptions{MemoryMode::Arena, *po.budget};
  Executor ex(g, ops, *be, eo);
  if (po.budget && ex.prepare(sp.plan) > *po.budget)
    REMAT_USER_ERROR("sample: --budget " << format_bytes(*po.budget) << " is too small: the plan "
                                         << "needs " << format_bytes(ex.prepare(sp.plan)));
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == ValueKind::Param || g.values[v].kind == ValueKind::Buffer)
      ex.write(static_cast<ValueId>(v), ck.values[v]);
  std::vector<uint8_t> captured(static_cast<size_t>(logits_desc.bytes()));
  ex.capture(logits_v, captured.data());
  std::fprintf(stderr, "sample: %s after step %lld, %lld x %lld new tokens, context %lld, "
                       "plan %s (peak %s), %s\n",
               g.name.c_str(), static_cast<long long>(ck.step), static_cast<long long>(samples),
               static_cast<long long>(new_tokens), static_cast<long long>(t_len),
               sp.plan.strategy.c_str(), format_bytes(sp.plan.predicted_peak).c_str(),
               be->name().c_str());

  std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(samples), prompt);
  std::vector<int32_t> input(static_cast<size_t>(samples * t_len)), labels(input.size(), 0);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t step = 0; step < new_tokens; ++step) {
    std::vector<int64_t> last(static_cast<size_t>(samples));
    for (int64_t s = 0; s < samples; ++s) {  // the last T tokens, padded after: causal attention
      const std::vector<int32_t>& q = seqs[static_cast<size_t>(s)];
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(q.size()), t_len);
      std::fill_n(input.begin() + s * t_len, t_len, 0);
      std::copy(q.end() - n, q.end(), input.begin() + s * t_len);
      last[static_cast<size_t>(s)] = n - 1;
    }
    ex.run_step(sp.plan, input.data(), labels.data(), step);
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t at = (s * t_len + last[static_cast<size_t>(s)]) * vocab;
      for (int64_t i = 0; i < vocab; ++i)
        row[static_cast<size_t>(i)] =
            logits_desc.dtype == DType::BF16
                ? bf16_to_float(reinterpret_cast<const uint16_t*>(captured.data())[at + i])
                : reinterpret_cast<const float*>(captured.data())[at + i];
      seqs[static_cast<size_t>(s)].push_back(next_token(row, temperature, top_k, rng));
    }
  }
  for (int64_t s = 0; s < samples; ++s) {
    const std::vector<int32_t>& q = seqs[static_cast<size_t>(s)];
    if (bytes) {
      std::string text;
      for (int32_t t : q) text += static_cast<char>(t);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
    } else {
      for (size_t i = 0; i < q.size(); ++i) std::printf("%s%d", i ? " " : "", q[i]);
      std::printf("\n");
    }
    if (s + 1 < samples) std::printf("---------------\n");
  }
  return 0;
}

}  // namespace
}  // namespace remat

int main(int argc, char** argv) {
  return remat::run_main([&] { return remat::sample_main(argc, argv); });
}

// Training data: a DataSource fills one batch of inputs and labels per step, deterministically
// (the same step always gives the same batch). Image models: synthetic (learnable, seeded) and
// CIFAR-10 binary batches. Token models: synthetic token patterns, byte-level text files and
// llm.c / nanoGPT token files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/config.h"
#include "runtime/core/tensor.h"

namespace remat {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills the graph's input and labels for 0-based `step`. Image models: images (N*C*H*W
  // floats, NCHW; bf16 where the graph's input is BF16, Note [bf16 input batch]) and labels (N, or N*H*W for per-pixel losses, each in [0, classes)). Token
  // models: token ids (N*T int32 in [0, vocab)) and the next tokens (N*T int32). Host memory,
  // owned by the caller.
  virtual void next_batch(int64_t step, void* input, int32_t* labels) = 0;
  // One line for logs: "synthetic (seed 7, 10 classes)", "cifar10 train: 50000 records ...".
  virtual std::string describe() const = 0;
  // Samples in one pass over the data (an epoch); 0 for generated data, which has no end.
  virtual int64_t size() const { return 0; }
  // Unreadable samples replaced so far (LoaderOptions::skip_bad_samples).
  virtual int64_t skipped_samples() const { return 0; }
};

// Source settings that are not the model's: decode threads (image sources), whether an
// unreadable sample is replaced by the next readable one (a warning on stderr and a count)
// instead of stopping the run, and evaluation order (samples in their sorted order, wrapping
// around; evaluation crops; no shuffling) for validation.
struct LoaderOptions {
  int threads = 1;
  bool skip_bad_samples = false;
  bool evaluation = false;
};
// --data-threads' default: the cores the training loop leaves (one process per machine), >= 1.
int default_loader_threads();

// Data parallel: which part of the global batch this rank's batch is. Sample i of a rank's
// batch at step s is sample first + i of the global batch of step s, so N ranks together see
// exactly the batches one process at N x batch sees, each rank a disjoint slice of them.
struct DataShard {
  int64_t first = 0;         // index of this rank's first sample in the global batch
  int64_t global_batch = 0;  // samples per step over all ranks; 0: this rank's batch (one process)
};

// `input` is the graph's input [N, C, H, W] (after overrides; token models: [N, T] int32) and
// `labels` its labels [N], [N, H, W] or [N, T]; relative data paths are taken from
// `config_dir`. Throws UserError at the config's `data:` position (or its `path`) for settings
// or files the source cannot serve.
// `section` is the data section to serve: cfg.data (null) or cfg.val.
std::unique_ptr<DataSource> make_data_source(const ModelConfig& cfg, const TensorDesc& input,
                                             const TensorDesc& labels,
                                             const std::string& config_dir,
                                             const DataShard& shard = {},
                                             const LoaderOptions& opt = {},
                                             const DataConfig* section = nullptr);

// The seeds of a synthetic source (Note [synthetic splits] in synthetic.cpp): the task (class
// or token patterns) and the samples. Training data draws both from its `seed`; a validation
// section draws held-out samples from its own seed, of the task of the training data's seed.
struct SyntheticSeed {
  SyntheticSeed(uint64_t seed) : seed(seed), task(seed) {}  // NOLINT(runtime/explicit): training
  SyntheticSeed(uint64_t seed, uint64_t task) : seed(seed), task(task), held_out(true) {}
  uint64_t seed;          // the config's `seed`: which samples
  uint64_t task;          // the patterns the classes (tokens) follow
  bool held_out = false;  // samples from a stream of their own, apart from any training data's
  uint64_t sample_stream() const;  // the seed of sample_rng
  std::string describe() const;    // "seed 7" or "seed 3, held out, the task of seed 7"
};

// Synthetic data. Classification (labels [N]): class k has a fixed pattern
//   P_k[c, h, w] = a_kc + b_kc * sin(fx_k * w + fy_k * h + phi_kc)
// (a ~ N(0, 0.5^2), b ~ U(0.5, 1), fx, fy ~ U(0.2, 1.5), phi ~ U(0, 2 pi), drawn from the
// task seed);
// a sample of class k is P_k + N(0, 1) noise (drawn by table: Note [table normals]). Per-pixel
// (labels [N, H, W]): the label map is class 0 with 1-3 rectangles of random classes painted
// over it; a pixel of class k has the value v_kc + N(0, 0.5^2) in channel c (v ~ N(0, 1) per
// class and channel). The label map may be smaller than the input (a network that downsamples):
// input pixel (y, x) then takes the class of label pixel (y * Hl / H, x * Wl / W).
// Per-position (input [N, T, F], labels [N, T']): the same in one dimension (Note
// [per-position labels] in synthetic.cpp).
// Sample i of step s depends only on (seed, s, shard.first + i), whatever the `threads` that
// fill a batch.
std::unique_ptr<DataSource> make_synthetic_source(const SyntheticSeed& seed, int64_t classes,
                                                  const TensorDesc& input,
                                                  const TensorDesc& labels,
                                                  const DataShard& shard = {}, int threads = 1);

// CIFAR-10 binary format: records of 1 label byte + 3072 bytes (R, G, B planes of 32x32,
// row-major). Files are read whole at construction and checked (size a multiple of 3073,
// labels <= 9). Pixels are normalised per channel: (byte / 255 - mean_c) / std_c with the
// CIFAR-10 training-set mean (0.4914, 0.4822, 0.4465) and std (0.2470, 0.2435, 0.2616).
// Batches take records in file order, wrapping around: step s, sample i is record
// (s * G + shard.first + i) mod total, G the global batch (N for one process).
std::unique_ptr<DataSource> make_cifar10_source(const std::vector<std::string>& files,
                                                const TensorDesc& input,
                                                const DataShard& shard = {});

// NumPy arrays (Note [npy data] in npy_source.cpp): inputs [S, ...input] and labels
// [S, ...labels] from two .npy files, each label in [0, classes) or `ignore`; shuffled per epoch
// from `seed` unless opt.evaluation.
std::unique_ptr<DataSource> make_npy_source(const std::string& inputs, const std::string& labels,
                                            const TensorDesc& input, const TensorDesc& label_desc,
                                            int64_t classes, int64_t ignore, uint64_t seed,
                                            const DataShard& shard, const LoaderOptions& opt);

// ", samples 8-15 of each global batch of 16" for a shard of a larger batch, else "".
std::string data_shard_describe(const DataShard& shard, int64_t batch);

// ---- token data (tokens.cpp) ----------------------------------------------------------------
// Every token source serves sample i of step s as a window w of T + 1 consecutive tokens: the
// input is w[0, T) and the labels w[1, T] (next-token prediction).
//
// Files (text, tokens): windows are consecutive and disjoint in file order, wrapping around:
// sample i of step s is window k = (s * G + shard.first + i) mod W (G the global batch, N for one
// process), W = (count - 1) / T, which starts at token k * T. A file needs at least T + 1 tokens.
// Text: every byte of the file is one token (vocabulary 256; the model's vocab must be >= 256).
// Token files, the layout of llm.c's and nanoGPT's prepared datasets (e.g. fineweb_train_*.bin):
// a header of 256 little-endian int32 — [0] magic 20240520, [1] version 1 (uint16 tokens),
// [2] the token count — then that many little-endian uint16 tokens. A wrong magic or version,
// a file shorter or longer than the header says, or a token >= vocab is an error naming the file
// and the token's position.
constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr int64_t kTokenFileHeaderInts = 256;

// The tokens of a file (read whole; token files checked against `vocab`; text: bytes).
std::vector<uint16_t> read_token_file(const std::string& path, int64_t vocab);
std::vector<uint16_t> read_text_file(const std::string& path);
// Serves windows of `tokens` (described as `what` in logs) for input [N, T] and labels [N, T].
std::unique_ptr<DataSource> make_token_window_source(std::vector<uint16_t> tokens,
                                                     const std::string& what,
                                                     const TensorDesc& input,
                                                     const DataShard& shard = {});

// Synthetic tokens: kSyntheticTokenPatterns seeded patterns, each a random sequence of
// kSyntheticTokenPeriod tokens in [0, vocab) (drawn from a small alphabet, so patterns share
// tokens and the next token depends on context, not only on the current token). Sample i of
// step s repeats one pattern, chosen with a random phase from (seed, s, i), and replaces each
// token by a random one with probability 1/16 (noise no model can learn). Data parallel: i is
// the sample's index in the global batch (shard.first + i). A model that attends
// to the previous period predicts the rest: the loss falls well below log(vocab).
constexpr int64_t kSyntheticTokenPatterns = 4;
constexpr int64_t kSyntheticTokenPeriod = 12;
std::unique_ptr<DataSource> make_synthetic_token_source(const SyntheticSeed& seed, int64_t vocab,
                                                        const TensorDesc& input,
                                                        const DataShard& shard = {});

constexpr int64_t kCifarRecordBytes = 3073;
constexpr float kCifarMean[3] = {0.4914f, 0.4822f, 0.4465f};
constexpr float kCifarStd[3] = {0.2470f, 0.2435f, 0.2616f};

}  // namespace remat

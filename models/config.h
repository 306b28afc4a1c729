// Model configuration: a YAML file read into a ModelConfig (layers flattened, repeat blocks
// expanded, inputs resolved to full layer names), with every user error at file:line:col.
//
// YAML schema ---------------------------------------------------------------------------------
//
//   name: small_cnn               # required: model name (string)
//   input: [3, 32, 32]            # float models, required: the per-sample float input, each
//                                 #   size >= 1: an image [C, H, W], a feature vector [F] (or
//                                 #   `input: 20`), a sequence or signal [T, F] / [C, L]
//   classes: 10                   # float models, required: classes (output channels per pixel)
//   sequence: 64                  # token models, required: T, tokens per sample (instead of
//   vocab: 256                    #   input and classes) and V, the vocabulary: the input is
//                                 #   int32 token ids [N, T] in [0, V), the labels the next
//                                 #   tokens [N, T], the last layer outputs logits [N, T, V]
//   batch: 32                     # required: N, samples per step (>= 1); with accumulate,
//                                 #   samples per micro-batch
//   accumulate: 4                 # K micro-batches of N per optimizer step, gradients summed
//                                 #   (default 1; Note [gradient accumulation] in
//                                 #   runtime/graph/accumulate.h); train --accumulate overrides
//   loss: softmax_xent            # softmax_xent (image default) | softmax_xent_pixel |
//                                 # token_xent (token default; for an input [T, F] a class at
//                                 # each position); or a map {op: token_xent,
//                                 # ignore_index: -1} whose other keys are the loss op's attrs
//   seed: 1                       # weight-init and dropout seed (default 0)
//   precision: bf16               # fp32 (default) | bf16: activations in bfloat16, PyTorch
//                                 # autocast's rules (Note [bf16 autocast] in models/build.cpp);
//                                 # train/plan/... --precision overrides it
//   layout: channels_last         # channels_first (default) | channels_last: 4-D activations
//                                 # stored NHWC where an op has that form (Note
//                                 # [channels-last layout] in models/channels_last.cpp)
//   fuse: batchnorm_relu          # none (default) | batchnorm_relu: each batchnorm whose output
//                                 # only a relu / relu6 layer reads becomes one node with that
//                                 # activation (Note [batchnorm + relu fusion] in
//                                 # batchnorm_relu_fusion.cpp)
//   optimizer: {op: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.0005}   # or {op: adam, ...}
//                                 # default {op: sgd, lr: 0.01}; other keys are the op's attrs
//                                 # (all: warmup_steps, schedule, decay_steps, min_lr,
//                                 # clip_norm; ops/lr_schedule.h)
//   data: {source: synthetic, seed: 7}   # default; or
//         {source: cifar10, path: data/cifar-10-batches-bin, split: train}  # split: train|test
//         {source: text, path: input.txt}       # token models: bytes as tokens (V >= 256)
//         {source: tokens, path: train.bin}     # token models: llm.c / nanoGPT uint16 tokens
//         {source: folder, path: imagenet/train}  # root/<class>/<image> (JPEG, PNG), classes
//                                 #   sorted by name, as torchvision's ImageFolder
//         {source: segmentation, images: img, labels: lbl}  # or {..., list: train.txt}: image +
//                                 #   PNG label map pairs (VOC / Cityscapes layouts)
//         {source: npy, inputs: x.npy, labels: y.npy, seed: 0}  # NumPy arrays [S, ...input] and
//                                 #   [S, ...labels] of any float-input model (Note [npy data])
//                                 # folder and segmentation also take seed, augment, mean, std,
//                                 # scale, ratio, flip, crop_pct (ImageTransformConfig)
//                                 # (paths relative to the config file's directory; in a
//                                 # KEY=VALUE override, to the working directory)
//   val: {source: folder, path: imagenet/val}   # validation data, the same keys as `data`
//                                 #   (never augmented); train --eval-every evaluates on it
//   model: {onnx: resnet18.onnx}  # instead of layers: the network of an ONNX file (Note
//                                 #   [ONNX import] in models/onnx/onnx_import.h; relative to
//                                 #   the config's folder). `input` / `sequence` are then the
//                                 #   size to import at (needed where the export left an axis
//                                 #   open), classes, vocab and the default loss come from the
//                                 #   output; every other key applies as to a YAML model
//   layers:                       # required, non-empty, in order (unless `model` is given)
//     - {name: conv1, op: conv2d, filters: 16, kernel: 3, padding: 1, activation: relu}
//     - {name: bn1, op: batchnorm}
//     - {name: pool1, op: maxpool, kernel: 2}
//     - name: stage               # a repeat block; its layers are named stage.0.a, stage.0.b,
//       repeat: 2                 #   stage.1.a, ... (repeat >= 1, default 1; blocks may nest;
//                                 #   at most kMaxModelLayers layers after expansion)
//       layers:
//         - {name: a, op: conv2d, filters: 16, kernel: 3, padding: 1, activation: relu}
//         - {name: b, op: conv2d, filters: 16, kernel: 3, padding: 1}
//         - {name: sum, op: add, inputs: [input, b]}
//     - {name: gap, op: global_avgpool, inputs: stage}   # a block's name = its last output
//     - {name: fc, op: dense, units: 10}
//
// Layer keys: `name` (required; letters, digits, '_' and '-'; unique among its siblings; not
// input/labels/loss), `op` (required; a user-visible forward op of the registry), `inputs` (a
// name or a list of names; default: the previous layer, or for the first layer of a list, the
// model input / the block iteration's input), `share` (a map from this layer's parameter
// suffixes to parameters of earlier layers, "<layer>.<suffix>", the layer resolved like an
// input: weight tying, e.g. `share: {weight: wte.weight}`; the shapes must agree, and the
// gradients of both uses are summed into the one parameter), `precision` (fp32 | bf16: this
// layer runs in that dtype whatever the model's precision; its float inputs are cast to it). Every other key is an attribute of the op,
// checked by the op's parser: YAML integers -> int, decimals -> double, true/false -> bool,
// other scalars -> string, lists of integers -> int list.
// Block keys: `name`, `repeat`, `layers`, `inputs` (the block's input, or two names [x, p]: see
// Note [two-input blocks]).
// Name resolution, innermost first: `input` (the model input at top level, the iteration's
// input inside a block); `previous` (in a two-input block); a layer of the same iteration
// defined earlier; then the enclosing
// scopes' layers defined earlier (a finished block's name means its last layer); finally a
// full name ("stage.0.b") defined earlier. Iteration i+1's input is iteration i's last layer.
// Forward references and cycles are errors.
//
// Note [two-input blocks]
// A block with `inputs: [x, p]` carries two values from iteration to iteration, as NASNet's
// cells do (each cell reads the previous cell's output and the one before it): iteration 0 sees
// x as `input` and p as `previous`; iteration i + 1 sees iteration i's last layer as `input` and
// iteration i's `input` as `previous`. `previous` anywhere else is an error.
//
// The builder appends the loss node
// (inputs: last layer, labels); the last layer must output [N, classes] for softmax_xent,
// [N, classes, H, W] for softmax_xent_pixel and [N, T, vocab] for token_xent.
// ---------------------------------------------------------------------------------------------
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/attrs.h"
#include "runtime/core/tensor.h"

namespace remat {

// The most layers a model may have once repeat blocks are expanded (nested blocks multiply:
// repeat 1000 inside repeat 1000 is a million layers). More is a UserError at the outermost
// block's `repeat` (or at the layer, without blocks) that states the limit.
constexpr int64_t kMaxModelLayers = 10000;

// Precision names as configs and command lines spell them: "fp32" (F32) and "bf16" (BF16).
// precision_from_name throws UserError naming the known ones.
const char* precision_name(DType t);
DType precision_from_name(const std::string& name);

// "input": the model input value name that layer inputs may refer to.
constexpr const char* kModelInputName = "input";
// "previous": the previous iteration's input inside a two-input repeat block.
constexpr const char* kPreviousInputName = "previous";

struct LayerConfig {
  std::string name;                      // full name: "conv1", "stage.0.a"
  std::string op;
  std::vector<std::string> inputs;       // full layer names, or kModelInputName
  std::vector<std::string> input_where;  // "file:line:col" of each input (the layer's if default)
  std::string where;                     // "file:line:col" of the layer's map
  std::string op_where;                  // "file:line:col" of the `op` value
  std::string inputs_where;              // of the `inputs` key, or the layer's position
  AttrMap attrs;                         // the op's attributes; origin "<where>: layer '<name>'"
  // `share`: parameter suffix -> full name of an earlier layer's parameter ("wte.weight"),
  // and the position of each entry.
  std::map<std::string, std::string> shared, shared_where;
  // `precision`: the dtype this layer runs in (F32 or BF16); unset: the model's rules.
  std::optional<DType> precision;
  std::string precision_where;
  // Parameter suffix -> the name of its value where that is not "<layer>.<suffix>": an imported
  // model's parameters keep their ONNX (PyTorch state_dict) names (Note [ONNX import]).
  std::map<std::string, std::string> param_names;
  // `size_of` (upsample): the full name of the earlier layer whose height and width the output
  // takes (Note [size-relative attributes] in models/size_attrs.cpp), and its position.
  std::string size_of, size_of_where;
};

struct OptimizerConfig {
  std::string op = "sgd";
  std::string where;   // "file:line:col" of the `optimizer` section (or of the file)
  std::string op_where;
  AttrMap attrs;       // everything but `op`
};

// Image sources' transforms (models/images/transforms.h): training crops as torchvision's
// RandomResizedCrop + RandomHorizontalFlip, evaluation as Resize(size / crop_pct) + CenterCrop,
// then per-channel (x / 255 - mean) / std. ImageNet's defaults.
struct ImageTransformConfig {
  bool augment = true;                         // data: true (training crops); val: always false
  double mean[3] = {0.485, 0.456, 0.406};
  double std[3] = {0.229, 0.224, 0.225};
  double scale[2] = {0.08, 1.0};               // crop area, fraction of the image
  double ratio[2] = {3.0 / 4.0, 4.0 / 3.0};    // crop aspect ratio w / h
  bool flip = true;                            // random horizontal flip (training)
  double crop_pct = 0.875;                     // evaluation: the center crop's share
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | cifar10 | folder | segmentation | npy | text |
                                     // tokens
  uint64_t seed = 0;                 // synthetic: patterns and samples (val: its held-out
                                     // samples, Note [synthetic splits]); folder, segmentation:
                                     // the shuffling and the augmentation; npy: the shuffling
  std::string path;                  // cifar10: folder with the binary batches; folder: the root of
                                     // the class folders; text, tokens: file
  std::string path_where;            // "file:line:col" of `path`
  std::string split = "train";       // cifar10: train (data_batch_1..5.bin) | test (test_batch.bin)
  // segmentation: parallel folders of images and label maps (same file stems), or a list file
  // of "image label" path pairs, one per line (relative to the list's folder).
  std::string images, labels, list;
  std::string images_where, labels_where, list_where;
  // npy: the inputs' and the labels' .npy files (labels shared with segmentation's field).
  std::string inputs, inputs_where;
  ImageTransformConfig transform;    // folder, segmentation
  std::string section = "data";      // "data" or "val", for messages
  std::string where;                 // "file:line:col" of the `data` section (or of the file)
};

struct OnnxSource;  // models/onnx/onnx_source.h
// What one `KEY=VALUE` override did (Note [config overrides]), for the run's "overrides:" line.
struct ConfigOverride {
  std::string key;     // the dotted path, as written
  std::string before;  // the config's value as YAML text; "" when the config does not set it
  std::string after;   // the override's value as YAML text
  bool same = false;   // the config already has this value: the override changes nothing
};

struct ModelConfig {
  std::string name;
  std::string source;   // file path or the source name given to parse_model_config
  std::string dir;      // directory of `source` ("" for text); data paths are relative to it
  Shape input;          // per-sample float input: [C, H, W], [F] or [T, F] (float models)
  int64_t classes = 0;  // image models
  int64_t sequence = 0; // token models: T (0 for image models)
  int64_t vocab = 0;    // token models: V
  std::string loss = "softmax_xent";
  AttrMap loss_attrs;   // the loss op's attributes (`loss` as a map)
  int64_t batch = 0;    // samples per pass (per micro-batch when accumulate > 1)
  int accumulate = 1;   // micro-batches per optimizer step
  uint64_t seed = 0;
  DType precision = DType::F32;  // `precision`: fp32 -> F32, bf16 -> BF16 (activations)
  bool channels_last = false;    // `layout: channels_last`
  bool fuse_batchnorm_relu = false;  // `fuse: batchnorm_relu`
  OptimizerConfig optimizer;
  DataConfig data;
  std::optional<DataConfig> val;    // `val`: the validation data (same keys as `data`)
  std::vector<LayerConfig> layers;  // flattened, in definition order
  // `model: {onnx: FILE}`: the layers are the file's, translated at `input` / `sequence`
  // (Note [ONNX import] in models/onnx/onnx_import.h); null for a model written in YAML.
  std::shared_ptr<const OnnxSource> onnx;
  std::string where_onnx;  // "file:line:col" of the `onnx` value
  // `model: {buffers: [...]}`: the file's initializers that are the module's buffers (Note
  // [module buffers] in models/onnx/onnx_import.h), and their dims and values in the file,
  // which `export` writes back.
  std::set<std::string> onnx_buffers;
  std::map<std::string, std::pair<Shape, std::vector<float>>> export_buffers;
  // Initial values of named parameters and buffers (an imported model's weights), applied after
  // the init rules (write_initial_values in models/initial_values.h); null: init rules only.
  std::shared_ptr<const std::map<std::string, std::vector<float>>> initial_values;
  // An imported model's parameters whose dims in the ONNX file (PyTorch's) differ from remat's
  // by dimensions of 1 (a layer scale [C, 1, 1] is a conv2d weight [C, 1, 1, 1]): `export`
  // writes them with these dims.
  std::map<std::string, Shape> export_dims;
  // An imported model's buffers that hold a constant of the graph, not a state_dict entry:
  // `export` leaves them out.
  std::set<std::string> export_skip;
  std::vector<ConfigOverride> overrides;  // in the order given
  // The settings as read, overrides applied: one "key.path: value" line per scalar (a list of
  // scalars on one line, a list of layers by their names), in the file's order. Data-parallel
  // ranks compare them (Note [ranks agree on the run] in tools/training/data_parallel.h).
  std::vector<std::string> settings;

  // Positions of top-level fields, for errors found later (builder, data).
  std::string where_input, where_classes, where_loss, where_batch, where_sequence, where_vocab,
      where_precision, where_accumulate;

  bool tokens() const { return sequence > 0; }  // a token model (input [N, T] int32)

  const LayerConfig* find_layer(const std::string& full_name) const;  // nullptr if absent
};

// "overrides: optimizer.lr 0.02 -> 0.01, batch 32 (the config's value: no change),
// optimizer.momentum 0.9 (not in the config)"; "" without overrides.
std::string describe_overrides(const ModelConfig& cfg);

// The label the loss skips (its ignore_index attribute), or kNoIgnoreIndex when it has none.
constexpr int64_t kNoIgnoreIndex = INT64_MIN;
int64_t loss_ignore_index(const ModelConfig& cfg);

// Reads and validates a YAML model file; errors are UserErrors naming path:line:col.
// `overrides` ("optimizer.lr=0.01", "layers.conv1.filters=32") edit it first and are validated
// as the file is; their errors name the override (Note [config overrides] in
// config_overrides.cpp).
ModelConfig load_model_config(const std::string& path,
                              const std::vector<std::string>& overrides = {});
// Same from text; `source_name` is used in positions ("t.yaml:5:7").
ModelConfig parse_model_config(const std::string& yaml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides = {});

}  // namespace remat

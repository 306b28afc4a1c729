// NumPy .npy arrays as training data (Note [npy files], Note [npy data]): the header as numpy
// writes it (versions 1 to 3) and every way it can be wrong, files numpy itself wrote, the
// source's order (a permutation per epoch in training, in turn for validation), shards, value
// and label checks, and a model trained and evaluated on arrays from the command line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data.h"
#include "models/npy.h"
#include "tests/model_test_util.h"
#include "tests/tool_runner.h"

namespace remat {
namespace {

using ::testing::HasSubstr;
using test::user_error;

// A .npy file's bytes as numpy.save writes them: the dict with a trailing ", " and the header
// padded with spaces to a multiple of 64 bytes, ending in a newline.
std::string npy_bytes(const std::string& descr, const Shape& shape, const void* data, size_t bytes,
                      int major = 1, const std::string& dict = "") {
  std::string dims;
  for (size_t k = 0; k < shape.size(); ++k) dims += (k ? ", " : "") + std::to_string(shape[k]);
  if (shape.size() == 1) dims += ",";
  std::string h = dict.empty() ? "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                                     dims + "), }"
                               : dict;
  const size_t len_bytes = major == 1 ? 2 : 4;
  while ((8 + len_bytes + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t k = 0; k < len_bytes; ++k) out += static_cast<char>((h.size() >> (8 * k)) & 0xFF);
  return out + h + std::string(static_cast<const char*>(data), bytes);
}

template <typename T>
std::string npy_of(const std::string& descr, const Shape& shape, const std::vector<T>& v,
                   int major = 1) {
  return npy_bytes(descr, shape, v.data(), v.size() * sizeof(T), major);
}

class NpyData : public ToolRunTest {
 public:
  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }

  // Runs `script` under this machine's Python with the scratch directory as argv[1]; false
  // where that Python has no numpy.
  bool run_numpy(const std::string& script) {
    std::ofstream(path("script.py")) << "import numpy as np, sys\nd = sys.argv[1]\n" << script;
    return std::system(("/usr/bin/python3 -c 'import numpy' 2>/dev/null && /usr/bin/python3 '" +
                        path("script.py") + "' '" + dir_ + "'").c_str()) == 0;
  }

 protected:
  std::string error_opening(const std::string& bytes) {
    const std::string p = write("bad.npy", bytes);
    return user_error([&] { NpyFile f(p); });
  }
};

TEST_F(NpyData, HeadersOfEveryVersionRead) {
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  for (int major : {1, 2, 3}) {
    NpyFile f(write("v.npy", npy_of("<f4", {2, 3}, v, major)));
    EXPECT_EQ(f.header().shape, (Shape{2, 3})) << major;
    EXPECT_EQ(f.header().type, NpyType::F32);
    EXPECT_EQ(f.header().offset % 64, 0);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(f.real(i), v[size_t(i)]);
  }
  const std::vector<int64_t> labels = {0, 4, 2};
  NpyFile l(write("l.npy", npy_of("<i8", {3}, labels)));
  EXPECT_EQ(l.integer(1), 4);
  EXPECT_EQ(l.describe(), path("l.npy") + " (int64 [3])");
  const std::vector<uint16_t> half = {0x3C00, 0xC000, 0x0001};  // 1, -2, the smallest subnormal
  NpyFile h(write("h.npy", npy_of("<f2", {3}, half)));
  EXPECT_EQ(h.real(0), 1.0);
  EXPECT_EQ(h.real(1), -2.0);
  EXPECT_EQ(h.real(2), std::ldexp(1.0, -24));
  // A run of elements as float32 (what the source serves): each element's value rounded once.
  const std::vector<double> d = {0.1, -1e-40, 3.0, 1e300};
  NpyFile f64(write("d.npy", npy_of("<f8", {4}, d)));
  for (const NpyFile* f : {&h, &f64}) {
    std::vector<float> run(3, -7.0f);
    f->floats(1, 2, run.data());
    for (int64_t i = 0; i < 2; ++i) EXPECT_EQ(run[size_t(i)], float(f->real(1 + i))) << i;
    EXPECT_EQ(run[2], -7.0f);  // nothing past the run
  }
  std::vector<float> all(6);
  NpyFile(write("v.npy", npy_of("<f4", {2, 3}, v))).floats(0, 6, all.data());
  EXPECT_EQ(all, v);
  std::vector<float> none;  // an empty run writes nothing (its buffer may be null: UBSan)
  NpyFile(write("z.npy", npy_of("<f4", {0, 3}, none))).floats(0, 0, none.data());
}

TEST_F(NpyData, BadFilesAreNamedWithWhatIsWrong) {
  const std::vector<float> v = {1, 2, 3, 4};
  struct Case {
    std::string bytes, want;
  };
  const std::string dict = "'fortran_order': False, 'shape': (4,), ";
  const std::vector<Case> cases = {
      {"", "the file is empty (0 bytes), not a .npy file"},
      {"PK\x03\x04 not numpy at all", "not a .npy file"},
      {npy_of("<f4", {4}, v).substr(0, 9), "ends inside its header length"},
      {npy_of("<f4", {4}, v).substr(0, 40), "header of 118 bytes, but the file has 30"},
      {npy_of("<f4", {4}, v).substr(0, 140), "the header says float32 [4] (16 bytes after 128 of "
                                             "header), the file has 140 bytes in all"},
      {npy_of("<f4", {4}, v) + "xx", "the file has 146 bytes in all"},
      {npy_of(">f4", {4}, v), "'>f4' is big-endian"},
      {npy_of("<c8", {2}, v), "'<c8' is not a type remat reads"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (4,), }"),
       "Fortran-order arrays are not supported"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': [('a', '<f4')], " + dict + "}"),
       "structured arrays"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4', " + dict + "'extra': 1, }"),
       "unknown key 'extra'"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4', 'descr': '<f4', " + dict + "}"),
       "key 'descr' given twice"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4', 'shape': (4,), }"),
       "lacks 'descr', 'fortran_order' or 'shape'"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4, " + dict + "}"),
       "expected '}' at byte 17"},
      {npy_bytes("", {}, v.data(), 16, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }"),
       "field 'shape': expected a tuple of non-negative integers"},
  };
  for (const Case& c : cases) {
    const std::string e = error_opening(c.bytes);
    EXPECT_THAT(e, HasSubstr(path("bad.npy"))) << c.want;
    EXPECT_THAT(e, HasSubstr(c.want)) << e;
  }
  std::string v4 = npy_of("<f4", {4}, v);
  v4[6] = 4;
  EXPECT_THAT(error_opening(v4), HasSubstr(".npy format version 4.0 (remat reads 1.0, 2.0 and 3.0)"));
}

// Files numpy.save wrote (skipped where this Python has no numpy): the values it saved.
TEST_F(NpyData, FilesNumpyWroteRead) {
  if (!run_numpy("np.save(d + '/a.npy', np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 8)\n"
                 "np.save(d + '/b.npy', np.array([[1, 2], [3, 250]], dtype=np.uint8))\n"
                 "np.save(d + '/c.npy', np.array([0.1, -1e300]))\n"
                 "np.save(d + '/e.npy', np.zeros((0, 5), dtype=np.int64))\n"))
    GTEST_SKIP() << "no numpy";
  NpyFile a(path("a.npy")), b(path("b.npy")), c(path("c.npy")), e(path("e.npy"));
  EXPECT_EQ(a.header().shape, (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(a.real(i), i / 8.0);
  EXPECT_EQ(b.header().type, NpyType::U8);
  EXPECT_EQ(b.integer(3), 250);
  EXPECT_EQ(c.header().type, NpyType::F64);
  EXPECT_EQ(c.real(0), 0.1);
  EXPECT_EQ(e.header().shape, (Shape{0, 5}));
}

// Twelve samples of [2, 3] floats (sample s holds 10 s + e) and a class each (s mod 3).
struct Arrays {
  std::string x, y;
};
Arrays twelve(NpyData& t, const std::string& xdescr = "<f4") {
  std::vector<float> x(12 * 6);
  std::vector<int64_t> y(12);
  for (size_t s = 0; s < 12; ++s) {
    y[s] = static_cast<int64_t>(s % 3);
    for (size_t e = 0; e < 6; ++e) x[s * 6 + e] = static_cast<float>(10 * s + e);
  }
  std::string xb = npy_of(xdescr, {12, 2, 3}, x);
  if (xdescr == "<f8") {
    std::vector<double> d(x.begin(), x.end());
    xb = npy_of("<f8", {12, 2, 3}, d);
  }
  return {t.write("x.npy", xb), t.write("y.npy", npy_of("<i8", {12}, y))};
}

const TensorDesc kIn{{4, 2, 3}, DType::F32}, kLab{{4}, DType::I32};

std::vector<int64_t> samples_of(DataSource& d, int64_t step, const TensorDesc& in = kIn) {
  std::vector<float> x(size_t(in.numel()));
  std::vector<int32_t> y(size_t(in.shape[0]));
  d.next_batch(step, x.data(), y.data());
  std::vector<int64_t> s;
  for (size_t i = 0; i < y.size(); ++i) {
    const int64_t id = static_cast<int64_t>(x[i * 6] / 10);
    for (size_t e = 0; e < 6; ++e) EXPECT_EQ(x[i * 6 + e], float(10 * id + int64_t(e)));
    EXPECT_EQ(y[i], id % 3);
    s.push_back(id);
  }
  return s;
}

TEST_F(NpyData, TrainingShufflesEachEpochAndValidationGoesInOrder) {
  for (const char* descr : {"<f4", "<f8"}) {
    const Arrays a = twelve(*this, descr);
    LoaderOptions val;
    val.evaluation = true;
    auto v = make_npy_source(a.x, a.y, kIn, kLab, 3, kNoIgnoreIndex, 0, {}, val);
    EXPECT_EQ(v->size(), 12);
    EXPECT_EQ(samples_of(*v, 0), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(samples_of(*v, 4), (std::vector<int64_t>{4, 5, 6, 7}));  // wraps around
    auto t = make_npy_source(a.x, a.y, kIn, kLab, 3, kNoIgnoreIndex, 7, {}, {});
    std::vector<int64_t> epoch0, epoch1;
    for (int64_t step = 0; step < 3; ++step)
      for (int64_t s : samples_of(*t, step)) epoch0.push_back(s);
    for (int64_t step = 3; step < 6; ++step)
      for (int64_t s : samples_of(*t, step)) epoch1.push_back(s);
    EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 12u);  // each once
    EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 12u);
    EXPECT_NE(epoch0, epoch1);
    EXPECT_THAT(t->describe(), HasSubstr("shuffled per epoch (seed 7)"));
    // Two ranks of batch 2: rank r's batch is samples 2r, 2r + 1 of the one-process batch.
    const TensorDesc half{{2, 2, 3}, DType::F32};
    auto r0 = make_npy_source(a.x, a.y, half, {{2}, DType::I32}, 3, kNoIgnoreIndex, 7, {0, 4}, {});
    auto r1 = make_npy_source(a.x, a.y, half, {{2}, DType::I32}, 3, kNoIgnoreIndex, 7, {2, 4}, {});
    std::vector<int64_t> both = samples_of(*r0, 1, half);
    for (int64_t s : samples_of(*r1, 1, half)) both.push_back(s);
    EXPECT_EQ(both, std::vector<int64_t>(epoch0.begin() + 4, epoch0.begin() + 8));
  }
}

TEST_F(NpyData, ShapesTypesValuesAndLabelsAreChecked) {
  const Arrays a = twelve(*this);
  auto err = [&](const std::string& x, const std::string& y, const TensorDesc& in,
                 const TensorDesc& lab, int64_t ignore = kNoIgnoreIndex) {
    return user_error([&] { make_npy_source(x, y, in, lab, 3, ignore, 0, {}, {})->next_batch(0, nullptr, nullptr); });
  };
  EXPECT_THAT(err(a.x, a.y, {{4, 3, 2}, DType::F32}, kLab),
              HasSubstr("x.npy (float32 [12, 2, 3]): inputs must be [S, 3, 2], S samples of the "
                        "model's input [3, 2]"));
  EXPECT_THAT(err(a.x, a.y, kIn, {{4, 2}, DType::I32}),
              HasSubstr("y.npy (int64 [12]): labels must be [S, 2] for the loss's labels [4, 2]"));
  EXPECT_THAT(err(a.y, a.y, {{4}, DType::F32}, kLab), HasSubstr("inputs must be floats"));
  const std::vector<int64_t> short_y(5, 0);
  EXPECT_THAT(err(a.x, write("s.npy", npy_of("<i8", {5}, short_y)), kIn, kLab),
              HasSubstr("s.npy (int64 [5]): 5 samples of labels, 12 of inputs in"));
  std::vector<int32_t> bad_y(12, 1);
  bad_y[9] = 3;
  const std::string b = write("b.npy", npy_of("<i4", {12}, bad_y));
  EXPECT_THAT(err(a.x, b, kIn, kLab), HasSubstr("b.npy: sample 9 is 3, not a class in [0, 3)"));
  bad_y[9] = -1;
  write("b.npy", npy_of("<i4", {12}, bad_y));
  EXPECT_THAT(err(a.x, b, kIn, kLab, 255), HasSubstr("sample 9 is -1, not a class in [0, 3) or "
                                                      "the ignore_index 255"));
  std::vector<float> nan_x(12 * 6, 0.5f);
  nan_x[2 * 6 + 4] = NAN;
  const std::string n = write("n.npy", npy_of("<f4", {12, 2, 3}, nan_x));
  LoaderOptions in_order;
  in_order.evaluation = true;
  auto src = make_npy_source(n, a.y, kIn, kLab, 3, kNoIgnoreIndex, 0, {}, in_order);
  std::vector<float> x(24);
  std::vector<int32_t> y(4);
  EXPECT_THAT(user_error([&] { src->next_batch(0, x.data(), y.data()); }),
              HasSubstr("n.npy: sample 2, element 4 is nan"));
  std::vector<double> big(12 * 6, 1.0);
  big[6] = 1e300;
  auto b64 = make_npy_source(write("big.npy", npy_of("<f8", {12, 2, 3}, big)), a.y, kIn, kLab, 3,
                             kNoIgnoreIndex, 0, {}, in_order);
  EXPECT_THAT(user_error([&] { b64->next_batch(0, x.data(), y.data()); }),
              HasSubstr("sample 1, element 0 is 1e+300 (beyond float32's range)"));
}

TEST(NpyConfig, BothFilesAreRequiredAndNamed) {
  const std::string head = "name: m\ninput: [4]\nclasses: 2\nbatch: 2\n";
  const std::string tail = "layers:\n  - {name: fc, op: dense, units: 2}\n";
  EXPECT_THAT(user_error([&] {
                parse_model_config(head + "data: {source: npy, inputs: x.npy}\n" + tail, "m.yaml");
              }),
              HasSubstr("m.yaml:5:7: data: field 'labels': is required for source npy ({source: "
                        "npy, inputs: x.npy, labels: y.npy})"));
  EXPECT_THAT(user_error([&] {
                parse_model_config(head + "data: {source: npy, inputs: x.npy, labels: y.npy, "
                                          "path: z}\n" + tail, "m.yaml");
              }),
              HasSubstr("unknown field for data source 'npy' (known: source, seed, inputs, labels)"));
  const ModelConfig cfg = parse_model_config(
      head + "data: {source: npy, inputs: a/x.npy, labels: y.npy, seed: 4}\n" + tail, "m.yaml");
  EXPECT_EQ(cfg.data.inputs, "a/x.npy");
  EXPECT_EQ(cfg.data.labels, "y.npy");
  EXPECT_EQ(cfg.data.seed, 4u);
}

// A class per position of a sequence (Note [per-position labels]) from arrays: a tagger whose
// class is the sign pattern of its features learns it, validation on held-out arrays reads
// nearly every position right (the three positions labelled -100 count nowhere), and evaluate
// reports the same metrics from the checkpoint.
TEST_F(NpyData, TrainAndEvaluateOnArrays) {
  if (!run_numpy("r = np.random.default_rng(0)\n"
                 "for name, n in (('train', 256), ('val', 64)):\n"
                 "    x = r.normal(size=(n, 8, 4)).astype(np.float32)\n"
                 "    y = (x[:, :, 0] > 0).astype(np.int64) + 2 * (x[:, :, 1] > 0)\n"
                 "    y[0, :3] = -100\n"  // token_xent's ignore_index: counted nowhere
                 "    np.save(d + '/' + name + '_x.npy', x)\n"
                 "    np.save(d + '/' + name + '_y.npy', y)\n"))
    GTEST_SKIP() << "no numpy";
  std::ofstream(path("tagger.yaml"))
      << "name: tagger\ninput: [8, 4]\nclasses: 4\nbatch: 32\nloss: token_xent\n"
         "optimizer: {op: adam, lr: 0.02}\n"
         "data: {source: npy, inputs: train_x.npy, labels: train_y.npy, seed: 3}\n"
         "val: {source: npy, inputs: val_x.npy, labels: val_y.npy}\n"
         "layers:\n"
         "  - {name: fc1, op: dense, units: 32, activation: relu}\n"
         "  - {name: fc2, op: dense, units: 4}\n";
  const std::string cfg = "--config '" + path("tagger.yaml") + "' ";
  RunResult r = run(TRAIN_EXE, cfg + "--steps 150 --log-every 1000 --save '" +
                                   path("ck.safetensors") + "' --summary '" + path("s.json") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("npy: 256 samples from " + path("train_x.npy") +
                               " (float32 [256, 8, 4]) and " + path("train_y.npy") +
                               " (int64 [256, 8]), shuffled per epoch (seed 3)"));
  const nlohmann::json s = nlohmann::json::parse(read_whole_file(path("s.json")));
  EXPECT_EQ(s.at("val_count"), 64 * 8 - 3);  // one pass over the validation arrays
  EXPECT_GT(s.at("val_top1").get<double>(), 0.9) << s.dump();
  RunResult e = run(EVALUATE_EXE, cfg + "--checkpoint '" + path("ck.safetensors") + "' --json '" +
                                      path("e.json") + "'");
  ASSERT_EQ(e.code, 0) << e.err;
  const nlohmann::json ev = nlohmann::json::parse(read_whole_file(path("e.json")));
  for (const char* k : {"val_loss", "val_top1", "val_count"}) EXPECT_EQ(ev.at(k), s.at(k)) << k;
  RunResult d = run(EVALUATE_EXE, cfg + "--checkpoint '" + path("ck.safetensors") + "' --data x");
  EXPECT_NE(d.code, 0);
  EXPECT_THAT(d.err, HasSubstr("override val.inputs=FILE val.labels=FILE instead"));
  // A missing file is named at the config's line.
  RunResult m = run(TRAIN_EXE, cfg + "data.inputs=nothere.npy --steps 1");
  EXPECT_EQ(m.code, 1);
  EXPECT_THAT(m.err, HasSubstr("source npy: cannot open '"));
  EXPECT_THAT(m.err, HasSubstr("nothere.npy': No such file or directory"));
}

}  // namespace
}  // namespace remat

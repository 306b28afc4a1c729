// ONNX models built in a test with ONNX's own protobuf messages: a small CNN of the ops
// torch.onnx.export writes, and the pieces to make broken variants of it.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace remat::test {

inline onnx::TensorProto onnx_floats(const std::string& name, const std::vector<int64_t>& dims,
                                     float first = 0.f, float step = 0.01f) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) t.add_float_data(first + step * static_cast<float>(i % 97));
  return t;
}

inline onnx::TensorProto onnx_ints(const std::string& name, const std::vector<int64_t>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return t;
}

inline onnx::TensorProto onnx_float_list(const std::string& name, const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (float v : values) t.add_float_data(v);
  return t;
}

inline onnx::NodeProto* onnx_node(onnx::GraphProto* g, const std::string& op,
                                  const std::vector<std::string>& in,
                                  const std::vector<std::string>& out, const std::string& name = "") {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? "/" + out[0] : name);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

inline void onnx_attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

inline void onnx_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// A value of the graph's inputs or outputs: float, dims of which "" entries are dynamic
// (dim_param "batch", "height", ...).
inline void onnx_value(onnx::ValueInfoProto* v, const std::string& name,
                       const std::vector<std::string>& dims, int elem = onnx::TensorProto::FLOAT) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && d[0] >= '0' && d[0] <= '9') dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

// x [batch, 3, 8, 8] -> Conv 4x3x3x3 (pads 1) + bias -> Relu -> MaxPool 2 -> GlobalAveragePool
// -> Flatten -> Gemm 10x4 (transB) -> y [batch, 10]. Parameters named as PyTorch names them.
inline onnx::ModelProto onnx_small_cnn(int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("remat-test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("small_cnn");
  onnx_value(g->add_input(), "x", {"batch", "3", "8", "8"});
  onnx_value(g->add_output(), "y", {"batch", "10"});
  *g->add_initializer() = onnx_floats("conv.weight", {4, 3, 3, 3}, -0.2f);
  *g->add_initializer() = onnx_floats("conv.bias", {4}, 0.1f);
  *g->add_initializer() = onnx_floats("fc.weight", {10, 4}, -0.1f);
  *g->add_initializer() = onnx_floats("fc.bias", {10});
  onnx::NodeProto* conv = onnx_node(g, "Conv", {"x", "conv.weight", "conv.bias"}, {"c"}, "/conv/Conv");
  onnx_attr(conv, "kernel_shape", std::vector<int64_t>{3, 3});
  onnx_attr(conv, "pads", std::vector<int64_t>{1, 1, 1, 1});
  onnx_node(g, "Relu", {"c"}, {"r"}, "/relu/Relu");
  onnx::NodeProto* pool = onnx_node(g, "MaxPool", {"r"}, {"p"}, "/pool/MaxPool");
  onnx_attr(pool, "kernel_shape", std::vector<int64_t>{2, 2});
  onnx_attr(pool, "strides", std::vector<int64_t>{2, 2});
  onnx_node(g, "GlobalAveragePool", {"p"}, {"gap"}, "/gap/GlobalAveragePool");
  onnx_attr(onnx_node(g, "Flatten", {"gap"}, {"flat"}, "/Flatten"), "axis", int64_t{1});
  onnx_attr(onnx_node(g, "Gemm", {"flat", "fc.weight", "fc.bias"}, {"y"}, "/fc/Gemm"), "transB",
            int64_t{1});
  return m;
}

inline void onnx_write(const onnx::ModelProto& m, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  m.SerializeToOstream(&f);
}

}  // namespace remat::test

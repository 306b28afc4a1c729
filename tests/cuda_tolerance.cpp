// The CUDA-vs-CPU tolerances (tests/cuda_tolerance.h): the per-op table and Note [GEMM
// tolerance]'s reduction lengths.
#include "tests/cuda_tolerance.h"

#include <map>

#include "runtime/core/check.h"

namespace remat {

// Note [GEMM tolerance]
// FP32 error of a sum of K products grows with K and with the size of the terms, not with the
// result (terms cancel): |gpu - cpu| <= 1e-6 + 2 sqrt(K) 2^-24 M_j + 64 2^-24 max_i M_i, where
// M_j = sum |a_k b_k| is output j of the same op run on the CPU with every input replaced by its
// absolute value, max_i M_i the largest over the output, and K the reduction length of the op
// at that node's shapes. 2 sqrt(K) is the random-walk growth of rounding errors on both sides
// (they sum in different orders and blockings). The last term covers the transforms of
// Winograd and FFT algorithms, whose error does not shrink with K and is not confined to one
// output's own terms: a transform mixes the inputs of a whole tile (Winograd) or plane (FFT),
// so an output whose terms are small carries the rounding of its neighbours' larger ones, up to
// 64 ulps of the largest. Seen: on an H100, 5.7e-6 relative on a 36-term conv input gradient;
// on an H200 (2026-11-27), 4.5e-6 on an output of 0.63 of a grouped convolution's input
// gradient (54 terms), beyond 64 ulps of that output's own M_j, which the bound charged before.
// A wrong kernel errs by the size of the result, far above this.
int64_t gemm_reduction_length(const Node& n, const Graph& g) {
  auto in = [&](size_t i) -> const Shape& { return g.value(n.inputs.at(i)).desc.shape; };
  if (n.op == "conv2d") return in(1)[1] * in(1)[2] * in(1)[3];             // C/g R S
  if (n.op == "conv2d_grad_input" || n.op == "conv2d_transpose")  // K R S (>= K/g R S)
    return in(1)[0] * in(1)[2] * in(1)[3];
  if (n.op == "conv2d_grad_weight")  // N Ho Wo: dy's elements over the K filters (NCHW or NHWC)
    return shape_numel(in(0)) / g.value(n.output).desc.shape.at(0);
  if (n.op == "dense" || n.op == "linear") return in(1)[1];                 // F
  if (n.op == "dense_grad_input") return in(1)[0];                          // U
  if (n.op == "dense_grad_weight") return shape_numel(in(0)) / in(0).back();  // rows (N, N T)
  if (n.op == "matmul") {                                                   // K
    const auto& a = n.attrs.values;
    auto ta = a.find("transpose_a");
    const bool transposed = ta != a.end() && std::get<bool>(ta->second);
    return transposed ? in(0)[in(0).size() - 2] : in(0).back();
  }
  REMAT_FAIL("no reduction length for op '" << n.op << "' (Note [GEMM tolerance])");
}

CudaTolerance cuda_tolerance(const std::string& op) {
  const std::map<std::string, CudaTolerance> table{
          // elementwise and data movement (kernels/elementwise.cu, upsample.cu, dropout.cu)
          {"relu", kCudaExact},
          {"relu6", kCudaExact},
          {"relu_grad", kCudaExact},
          {"relu6_grad", kCudaExact},
          {"add", kCudaExact},
          {"concat", kCudaExact},
          {"concat_slice", kCudaExact},
          {"channel_slice", kCudaExact},
          {"channel_slice_grad", kCudaExact},
          {"channel_shuffle", kCudaExact},  // a permutation
          {"flatten", kCudaExact},
          {"flatten_grad", kCudaExact},
          {"reshape", kCudaExact},
          {"upsample", kCudaExact},       // nearest, and bilinear: Note [bilinear arithmetic]
          {"upsample_grad", kCudaExact},
          {"zeropad", kCudaExact},
          {"crop", kCudaExact},
          {"dropout", kCudaExact},
          {"dropout_grad", kCudaExact},
          {"global_avgpool_grad", kCudaExact},
          {"channel_scale", kCudaExact},  // one FP32 product, as on the CPU
          {"channel_shift", kCudaExact},  // bias_act_forward: one FP32 sum, as on the CPU
          // the piecewise curves in double, correctly rounded on both sides (Note [curve arithmetic])
          {"hardsigmoid", kCudaExact},
          {"hardsigmoid_grad", kCudaExact},
          {"hardswish", kCudaExact},
          {"affine", kCudaExact},  // a product and a sum in double, each rounded as on the CPU
          {"sqrt", kCudaExact},       // IEEE sqrt in double, rounded once
          {"sqrt_grad", kCudaExact},  // a product and an IEEE division in double
          {"hardswish_grad", kCudaExact},
          {"leaky_relu", kCudaExact},
          {"leaky_relu_grad", kCudaExact},
          {"maxpool", kCudaExact},
          // reductions in a different order than the CPU
          {"global_avgpool", kCudaReduction},
          {"softmax_xent", kCudaReduction},
          {"softmax_xent_grad", kCudaReduction},
          {"softmax_xent_pixel", kCudaReduction},
          {"softmax_xent_pixel_grad", kCudaReduction},
          {"conv2d_grad_bias", kCudaReduction},
          {"dense_grad_bias", kCudaReduction},
          // transformer layers: data movement and lookups exact; row statistics, softmax and
          // double-precision transcendental math within the reduction tolerance
          {"embedding", kCudaExact},
          {"embedding_grad_weight", kCudaExact},  // same order, Note [deterministic embedding gradient]
          {"position_embedding", kCudaExact},
          {"add_constant", kCudaExact},  // position_embedding's kernel
          {"add_constant_grad_table", kCudaReduction},  // bias_grad_reduce, plane 1
          {"mul_table", kCudaExact},         // channel_scale's kernel: one FP32 product
          {"mul_table_grad_x", kCudaExact},  // the same
          {"mul_table_grad_weight", kCudaReduction},  // sums in double (a warp's order for 1 entry)
          {"row_mean", kCudaReduction},  // global_avgpool's kernel: double sums, a warp's order
          {"row_mean_grad", kCudaExact},  // one FP32 division per value, as the CPU's
          {"position_embedding_grad_weight", kCudaReduction},  // bias_grad_reduce, plane 1: sliced past 64 rows
          {"attention", kCudaReduction},       // double sums, block reductions' order
          {"attention_grad", kCudaReduction},
          {"split_heads", kCudaExact},
          {"cast", kCudaExact},  // the same round-to-nearest-even as bf16_from_float
          {"layout", kCudaExact},  // a permutation
          {"transpose", kCudaExact},  // a permutation
          {"class_token", kCudaExact},  // copies
          {"class_token_grad_weight", kCudaExact},  // sums over n in double, n in order as the CPU
          {"relative_position_bias", kCudaExact},  // one add of a table entry
          {"roll", kCudaExact},  // a permutation
          {"relative_position_bias_grad_table", kCudaReduction},  // bias_grad_reduce, then sums in double
          {"grad_accumulate", kCudaExact},  // one add and one product, rounded as the CPU's
          {"merge_heads", kCudaExact},
          {"layernorm", kCudaReduction},
          {"layernorm_grad_input", kCudaReduction},
          {"layernorm_grad_weight", kCudaReduction},
          {"layernorm_grad_bias", kCudaReduction},
          {"gelu", kCudaReduction},
          {"gelu_grad", kCudaReduction},
          {"sigmoid", kCudaReduction},  // exp and tanh of CUDA's math library, in double
          {"sigmoid_grad", kCudaReduction},
          {"tanh", kCudaReduction},
          {"tanh_grad", kCudaReduction},
          {"gelu_erf", kCudaReduction},
          {"gelu_erf_grad", kCudaReduction},
          {"erf", kCudaReduction},  // erf and exp of CUDA's math library, in double
          {"erf_grad", kCudaReduction},
          {"silu", kCudaReduction},
          {"silu_grad", kCudaReduction},
          {"pow", kCudaReduction},  // CUDA's pow in double (x^2, x^3 are products: exact)
          {"pow_grad", kCudaReduction},
          {"channel_scale_grad", kCudaReduction},  // plane sums in double, another order
          {"channel_shift_grad", kCudaReduction},  // bias_grad_reduce: row sums, another order
          {"softmax", kCudaReduction},
          {"softmax_grad", kCudaReduction},
          {"token_xent", kCudaReduction},
          {"token_xent_grad", kCudaReduction},
          {"clip_grad_norm", kCudaReduction},
          {"maxpool_grad", kCudaReduction},
          {"avgpool", kCudaReduction},
          {"avgpool_grad", kCudaReduction},
          // optimizer updates
          {"sgd", kCudaOptimizer},
          {"adam", kCudaOptimizer},
          {"adamw", kCudaOptimizer},
          // cuDNN / cuBLAS (TF32 off)
          {"conv2d", kCudaGemm},
          {"conv2d_grad_input", kCudaGemm},
          {"conv2d_transpose", kCudaGemm},  // conv2d_grad_input's pass, then the bias
          {"conv2d_grad_weight", kCudaGemm},
          {"dense", kCudaGemm},
          {"dense_grad_input", kCudaGemm},
          {"dense_grad_weight", kCudaGemm},
          {"linear", kCudaGemm},
          {"matmul", kCudaGemm},
          // cuDNN batch norm and our channel reductions: statistics in another order
          {"batchnorm", kCudaBatchNorm},
          {"batchnorm_grad_input", kCudaBatchNorm},
          {"batchnorm_grad_weight", kCudaBatchNorm},
          {"batchnorm_grad_bias", kCudaBatchNorm},
      };
  auto it = table.find(op);
  REMAT_CHECK(it != table.end(),
              "no CUDA tolerance for op '" << op << "': add it to cuda_tolerance()");
  return it->second;
}


}  // namespace remat

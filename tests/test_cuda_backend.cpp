// The CUDA backend: without a device it declines with a reason naming CUDA; with one, memory
// round trips, timing, workspace queries, the missing-CUDA-path error, TF32 option and NVTX.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/core/check.h"
#include "tests/scoped_env.h"
#ifdef REMAT_HAVE_CUDA
#include "runtime/backends/cuda_context.h"
#endif

namespace remat {
namespace {

TEST(CudaBackend, WithoutDeviceDeclinesWithReason) {
  std::string why;
  if (cuda_device_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  std::string why2;
  auto be = make_cuda_backend(0, &why2);
  EXPECT_EQ(be, nullptr);
  EXPECT_NE(why2.find("CUDA"), std::string::npos) << why2;
  if (cuda_backend_built()) {
    EXPECT_NE(why2.find("cudaGetDeviceCount failed"), std::string::npos) << why2;
    EXPECT_THROW(cuda_device_info(0), Error);
  }
  // A null `why` is allowed.
  EXPECT_EQ(make_cuda_backend(0, nullptr), nullptr);
}

// Runs `body` with environment variable `var` set to `value` (nullptr: unset), then puts back
// what was there.
void with_env(const char* var, const char* value, const std::function<void()>& body) {
  ScopedEnv env(var, value);
  body();
}

// `read` must throw a UserError whose message contains `text`.
void expect_user_error(const std::function<void()>& read, const std::string& text) {
  try {
    read();
    ADD_FAILURE() << "no error; expected: " << text;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// REMAT_CONV_LAYOUT (Note [staged NHWC convolutions]) and REMAT_CONV_GEMM (Note [1x1
// convolutions as GEMMs]): every name, unset as auto, and a clear error naming a bad value;
// read in every build, with or without a device.
TEST(CudaBackend, ConvolutionKnobsFromTheEnvironment) {
  const char* layout = "REMAT_CONV_LAYOUT";
  with_env(layout, nullptr, [] { EXPECT_EQ(cuda_precision_options("bf16").conv_layout, ConvLayout::Auto); });
  with_env(layout, "nhwc", [] { EXPECT_EQ(cuda_precision_options("bf16").conv_layout, ConvLayout::Nhwc); });
  with_env(layout, "nchw", [] { EXPECT_EQ(conv_layout_from_env(), ConvLayout::Nchw); });
  with_env(layout, "auto", [] { EXPECT_EQ(conv_layout_from_env(), ConvLayout::Auto); });
  with_env(layout, "NHWC", [] {
    expect_user_error([] { conv_layout_from_env(); },
                      "REMAT_CONV_LAYOUT=NHWC: expected auto, nchw or nhwc");
  });
  const char* gemm = "REMAT_CONV_GEMM";
  with_env(gemm, nullptr, [] { EXPECT_EQ(cuda_precision_options("bf16").conv_gemm, ConvGemm::Auto); });
  with_env(gemm, "on", [] { EXPECT_EQ(cuda_precision_options("fp32").conv_gemm, ConvGemm::On); });
  with_env(gemm, "off", [] { EXPECT_EQ(conv_gemm_from_env(), ConvGemm::Off); });
  with_env(gemm, "auto", [] { EXPECT_EQ(conv_gemm_from_env(), ConvGemm::Auto); });
  with_env(gemm, "yes", [] {
    expect_user_error([] { conv_gemm_from_env(); }, "REMAT_CONV_GEMM=yes: expected auto, off or on");
  });
  const char* bn = "REMAT_BN_KERNELS";
  with_env(bn, nullptr, [] { EXPECT_EQ(cuda_precision_options("bf16").bn_kernels, BnKernels::Auto); });
  with_env(bn, "own", [] { EXPECT_EQ(cuda_precision_options("fp32").bn_kernels, BnKernels::Own); });
  with_env(bn, "cudnn", [] { EXPECT_EQ(bn_kernels_from_env(), BnKernels::Cudnn); });
  with_env(bn, "auto", [] { EXPECT_EQ(bn_kernels_from_env(), BnKernels::Auto); });
  with_env(bn, "cuDNN", [] {
    expect_user_error([] { bn_kernels_from_env(); }, "REMAT_BN_KERNELS=cuDNN: expected auto, own or cudnn");
  });
  const char* attn = "REMAT_ATTENTION_KERNEL";
  with_env(attn, nullptr, [] { EXPECT_EQ(cuda_precision_options("bf16").attention_kernel, AttentionKernel::Flash); });
  with_env(attn, "tiled", [] { EXPECT_EQ(cuda_precision_options("fp32").attention_kernel, AttentionKernel::Tiled); });
  with_env(attn, "rows", [] { EXPECT_EQ(attention_kernel_from_env(), AttentionKernel::Rows); });
  with_env(attn, "flash", [] { EXPECT_EQ(attention_kernel_from_env(), AttentionKernel::Flash); });
  with_env(attn, "flash2", [] {
    expect_user_error([] { attention_kernel_from_env(); }, "REMAT_ATTENTION_KERNEL=flash2: expected flash, rows or tiled");
  });
}

TEST(CudaBackend, LibraryVersionsReadWithoutDevice) {
  if (!cuda_backend_built()) GTEST_SKIP() << "built without CUDA";
  std::string why;
  // The test binary runs against the cuDNN/cuBLAS it was built with.
  EXPECT_TRUE(cuda_libraries_compatible(&why)) << why;
  const std::string v = cuda_library_versions();
  EXPECT_NE(v.find("cuDNN 9."), std::string::npos) << v;
  EXPECT_NE(v.find("cuBLAS"), std::string::npos) << v;
}

TEST(CudaBackend, DeviceLabel) {
  CudaDeviceInfo info;
  info.index = 1;
  info.name = "NVIDIA H100 80GB HBM3";
  info.major = 9;
  info.minor = 0;
  info.total_bytes = 85520809984;  // 79.6 GiB
  EXPECT_EQ(cuda_device_label(info), "cuda:1 NVIDIA H100 80GB HBM3 (sm_90, 80 GiB)");
}

#ifdef REMAT_HAVE_CUDA

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_device_available(&why)) GTEST_SKIP() << why;
    be_ = make_cuda_backend(0, &why);
    ASSERT_TRUE(be_) << why;
  }
  std::unique_ptr<Backend> be_;
};

// An op whose CUDA path sets every byte of its output to 0x01 on the backend's stream.
OpDef memset_op() {
  OpDef op;
  op.name = "fill_ones";
  op.cuda = [](const ExecContext& ctx) {
    auto* cu = static_cast<CudaContext*>(ctx.device);
    REMAT_CUDA_CHECK(cudaMemsetAsync(ctx.output.data, 1,
                                     static_cast<size_t>(ctx.output.desc->bytes()), cu->stream));
  };
  return op;
}

TEST_F(CudaDevice, NameAndInfo) {
  EXPECT_EQ(be_->kind(), DeviceKind::Cuda);
  EXPECT_NE(be_->name().find("cuda:0"), std::string::npos) << be_->name();
  CudaDeviceInfo info = cuda_device_info(0);
  EXPECT_GT(info.total_bytes, 0);
  EXPECT_GT(info.free_bytes, 0);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  EXPECT_EQ(be_->name(), cuda_device_label(info));
}

// Kernel choices away from their defaults are part of the name, which keys the profiled cost
// cache (runtime/profiler.cpp): a table measured with other kernels has other workspaces.
TEST_F(CudaDevice, KernelChoicesAreInTheName) {
  CudaOptions o;
  o.attention_kernel = AttentionKernel::Rows;
  o.conv_layout = ConvLayout::Nchw;
  std::string why;
  std::unique_ptr<Backend> be = make_cuda_backend(0, &why, o);
  ASSERT_TRUE(be) << why;
  EXPECT_EQ(be->name(),
            cuda_device_label(cuda_device_info(0)) + " (attention rows, conv layout nchw)");
  CudaOptions w;
  w.workspace_limit = int64_t{220} << 20;  // train's under a budget (Note [conv algorithm choice])
  be = make_cuda_backend(0, &why, w);
  ASSERT_TRUE(be) << why;
  EXPECT_EQ(be->name(), cuda_device_label(cuda_device_info(0)) + " (workspace limit 220 MiB)");
}

TEST_F(CudaDevice, AllocCopyFillRoundTrip) {
  const int64_t n = 100003;
  std::vector<float> host(n), back(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const int64_t bytes = n * 4;
  void* a = be_->raw_alloc(bytes);
  void* b = be_->raw_alloc(bytes);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  be_->copy_from_host(a, host.data(), bytes);
  be_->copy(b, a, bytes);
  be_->copy_to_host(back.data(), b, bytes);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), bytes), 0);
  be_->fill_zero(b, bytes);
  be_->copy_to_host(back.data(), b, bytes);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 0.0f) << i;
  be_->synchronize();
  be_->raw_free(a);
  be_->raw_free(b);
  void* z = be_->raw_alloc(0);  // never null, even for zero bytes
  EXPECT_NE(z, nullptr);
  be_->raw_free(z);
}

TEST_F(CudaDevice, HugeAllocationThrowsWithBytes) {
  try {
    be_->raw_alloc(int64_t{1} << 50);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1125899906842624"), std::string::npos) << e.what();
  }
  // The backend is still usable.
  void* p = be_->raw_alloc(1024);
  be_->raw_free(p);
  be_->synchronize();
}

TEST_F(CudaDevice, RunAndTime) {
  const OpDef op = memset_op();
  TensorDesc d{{1 << 22}, DType::F32};  // 16 MiB
  ExecContext ctx;
  ctx.output = TensorView{&d, be_->raw_alloc(d.bytes())};
  be_->fill_zero(ctx.output.data, d.bytes());
  be_->run(op, ctx);
  EXPECT_NE(ctx.device, nullptr);
  std::vector<unsigned char> host(static_cast<size_t>(d.bytes()));
  be_->copy_to_host(host.data(), ctx.output.data, d.bytes());
  EXPECT_EQ(host.front(), 1);
  EXPECT_EQ(host.back(), 1);
  std::vector<double> ms = be_->time_run(op, ctx, 2, 5);
  ASSERT_EQ(ms.size(), 5u);
  for (double t : ms) EXPECT_GT(t, 0);
  be_->raw_free(ctx.output.data);
}

TEST_F(CudaDevice, MissingCudaPathIsAClearError) {
  OpDef op;
  op.name = "cpu_only";
  op.cpu = [](const ExecContext&) {};
  Node n;
  n.name = "layer7";
  ExecContext ctx;
  ctx.node = &n;
  for (int timed = 0; timed < 2; ++timed) {
    try {
      if (timed) be_->time_run(op, ctx, 1, 1);
      else be_->run(op, ctx);
      FAIL() << "ran an op without a CUDA path";
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("op 'cpu_only'"), std::string::npos) << w;
      EXPECT_NE(w.find("layer7"), std::string::npos) << w;
      EXPECT_NE(w.find("has no CUDA path"), std::string::npos) << w;
    }
  }
}

TEST_F(CudaDevice, WorkspaceComesFromTheOpWithContext) {
  OpDef op = memset_op();
  EXPECT_EQ(be_->workspace_bytes(op, ExecContext{}), 0);
  op.cuda_workspace = [](const ExecContext& ctx) -> int64_t {
    auto* cu = static_cast<const CudaContext*>(ctx.device);
    if (!cu || !cu->stream || !cu->cudnn || !cu->cublas || !cu->cache) return -1;
    return cu->workspace_limit == (int64_t{1} << 30) ? 12345 : -2;
  };
  EXPECT_EQ(be_->workspace_bytes(op, ExecContext{}), 12345);
}

TEST_F(CudaDevice, Tf32OnlyWhenAsked) {
  std::string why;
  CudaOptions opt;
  opt.matmul_tf32 = true;
  opt.conv_tf32 = true;
  opt.workspace_limit = 1 << 20;
  auto tf32 = make_cuda_backend(0, &why, opt);
  ASSERT_TRUE(tf32) << why;
  cublasMath_t mode_default{}, mode_tf32{};
  bool flag_default = true, flag_tf32 = false;
  int64_t limit = 0;
  auto probe = [&](Backend& be, cublasMath_t* mode, bool* flag) {
    OpDef op;
    op.name = "probe";
    op.cuda = [&, mode, flag](const ExecContext& ctx) {
      auto* cu = static_cast<CudaContext*>(ctx.device);
      REMAT_CUBLAS_CHECK(cublasGetMathMode(cu->cublas, mode));
      *flag = cu->matmul_tf32 && cu->conv_tf32;
      limit = cu->workspace_limit;
    };
    ExecContext ctx;
    be.run(op, ctx);
  };
  probe(*be_, &mode_default, &flag_default);
  EXPECT_EQ(mode_default, CUBLAS_DEFAULT_MATH);
  EXPECT_FALSE(flag_default);
  probe(*tf32, &mode_tf32, &flag_tf32);
  EXPECT_EQ(mode_tf32, CUBLAS_TF32_TENSOR_OP_MATH);
  EXPECT_TRUE(flag_tf32);
  EXPECT_EQ(limit, 1 << 20);
}

TEST_F(CudaDevice, NvtxRanges) {
  EXPECT_NO_THROW({
    be_->range_push("phase", kRangePhase);
    be_->range_push("conv1", kRangeCompute);
    be_->range_pop();
    be_->range_pop();
  });
}

#endif  // REMAT_HAVE_CUDA

}  // namespace
}  // namespace remat

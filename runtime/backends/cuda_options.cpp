// CudaOptions from the environment (backend.h): the convolution, batch-norm and attention knobs, read in
// every build so that a CPU-only binary rejects a bad value the same way.
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backends/backend.h"

namespace remat {
namespace {

// The value environment variable `var` names among `names` (unset or empty: the first); a
// user error naming the variable, its value and the choices for anything else.
template <typename E>
E choice_from_env(const char* var, const std::vector<std::pair<std::string, E>>& names) {
  const char* v = std::getenv(var);
  const std::string s = v ? v : "";
  if (s.empty()) return names.front().second;
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i) {
    if (s == names[i].first) return names[i].second;
    choices += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i].first;
  }
  REMAT_USER_ERROR(var << "=" << s << ": expected " << choices);
}

}  // namespace

ConvLayout conv_layout_from_env() {
  return choice_from_env<ConvLayout>(
      "REMAT_CONV_LAYOUT",
      {{"auto", ConvLayout::Auto}, {"nchw", ConvLayout::Nchw}, {"nhwc", ConvLayout::Nhwc}});
}

ConvGemm conv_gemm_from_env() {
  return choice_from_env<ConvGemm>(
      "REMAT_CONV_GEMM", {{"auto", ConvGemm::Auto}, {"off", ConvGemm::Off}, {"on", ConvGemm::On}});
}

BnKernels bn_kernels_from_env() {
  return choice_from_env<BnKernels>(
      "REMAT_BN_KERNELS",
      {{"auto", BnKernels::Auto}, {"own", BnKernels::Own}, {"cudnn", BnKernels::Cudnn}});
}

AttentionKernel attention_kernel_from_env() {
  return choice_from_env<AttentionKernel>(
      "REMAT_ATTENTION_KERNEL",
      {{"flash", AttentionKernel::Flash},
       {"rows", AttentionKernel::Rows},
       {"tiled", AttentionKernel::Tiled}});
}

}  // namespace remat

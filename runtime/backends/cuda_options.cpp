// CudaOptions from the environment (backend.h): the convolution layout and GEMM knobs, read in
// every build so that a CPU-only binary rejects a bad value the same way.
#include <cstdlib>
#include <string>

#include "runtime/backends/backend.h"

namespace remat {

ConvLayout conv_layout_from_env() {
  const char* v = std::getenv("REMAT_CONV_LAYOUT");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return ConvLayout::Auto;
  if (s == "nchw") return ConvLayout::Nchw;
  if (s == "nhwc") return ConvLayout::Nhwc;
  REMAT_USER_ERROR("REMAT_CONV_LAYOUT=" << s << ": expected auto, nchw or nhwc");
}

ConvGemm conv_gemm_from_env() {
  const char* v = std::getenv("REMAT_CONV_GEMM");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return ConvGemm::Auto;
  if (s == "off") return ConvGemm::Off;
  if (s == "on") return ConvGemm::On;
  REMAT_USER_ERROR("REMAT_CONV_GEMM=" << s << ": expected auto, off or on");
}

}  // namespace remat

// CudaOptions from the environment (backend.h): the convolution layout knob, read in every
// build so that a CPU-only binary rejects a bad value the same way.
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

}  // namespace remat

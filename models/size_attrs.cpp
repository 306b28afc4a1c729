// Note [size-relative attributes]
// PSPNet's pyramid pools its feature map into 1 x 1, 2 x 2, 3 x 3 and 6 x 6 bins and upsamples
// each back to the map's size; Keras computes those kernels and factors from the input size.
// With fixed numbers a config builds at one input size only, and the input-size search
// (`maxbatch --vary input`) finds nothing to vary. So two attributes are relative:
// - `bins: b` or `[bh, bw]` on avgpool / maxpool: kernel = stride = [H / bh, W / bw] of its
//   input, no padding (PyTorch's AdaptiveAvgPool2d where the bins divide the input; a size they
//   do not divide is refused, and the search passes over it).
// - `size_of: layer` on upsample: the output takes that earlier layer's height and width,
//   factor = [H' / H, W' / W] (integers, else refused). The layer is read for its size only:
//   it is not an input, and the graph does not keep it alive for this.
// Both are resolved as each graph is built, before the op parses its attributes, so a graph,
// its plan and its problem file hold plain kernels and factors; the op code is unchanged.
#include "models/size_attrs.h"

#include <string>
#include <vector>

#include "runtime/core/check.h"

namespace remat {
namespace {

// Height and width of a 4-D image value, whatever its layout; `image` false for other values.
struct ImageSize {
  bool image = false;
  int64_t h = 0, w = 0;
};

ImageSize image_size(const Graph& g, const ChannelsLastPlacer& layouts, ValueId v) {
  const Shape& s = g.value(v).desc.shape;
  if (s.size() != 4) return {};
  const bool last = layouts.stored_last(v);
  return {true, s[last ? 1 : 2], s[last ? 2 : 3]};
}

std::string hw(const ImageSize& s) { return std::to_string(s.h) + " x " + std::to_string(s.w); }

// The position of `key` in the layer's attributes, or the layer's own.
std::string at(const LayerConfig& l, const AttrMap& attrs, const std::string& key) {
  auto it = attrs.where.find(key);
  const std::string where = it != attrs.where.end() && !it->second.empty() ? it->second : l.where;
  return where + ": layer '" + l.name + "': field '" + key + "': ";
}

void resolve_bins(const LayerConfig& l, AttrMap& attrs, const ImageSize& input) {
  const std::string where = at(l, attrs, "bins");
  if (l.op != "avgpool" && l.op != "maxpool")
    REMAT_USER_ERROR(where << "only avgpool and maxpool take it (op here: '" << l.op << "')");
  for (const char* k : {"kernel", "stride", "padding"})
    if (attrs.has(k))
      REMAT_USER_ERROR(where << "bins sets the kernel and stride from the input's size; give "
                                "bins or '"
                             << k << "', not both");
  AttrReader r(attrs);
  const std::vector<int64_t> b = r.get_ints("bins", 2, {}, 1, int64_t(1) << 20);
  if (!input.image)
    REMAT_USER_ERROR(where << "bins pools an image [N, C, H, W]; the input is not one");
  if (input.h % b[0] != 0 || input.w % b[1] != 0)
    REMAT_USER_ERROR(where << "the input's " << hw(input) << " does not divide into " << b[0]
                           << " x " << b[1] << " bins");
  const AttrValue kernel = std::vector<int64_t>{input.h / b[0], input.w / b[1]};
  attrs.values.erase("bins");
  attrs.set("kernel", kernel);
  attrs.set("stride", kernel);
}

void resolve_size_of(const LayerConfig& l, AttrMap& attrs, const ImageSize& input,
                     const ImageSize& target) {
  const std::string where = l.size_of_where + ": layer '" + l.name + "': field 'size_of': ";
  if (attrs.has("factor"))
    REMAT_USER_ERROR(where << "size_of sets the factor; give size_of or 'factor', not both");
  if (!input.image || !target.image || input.h < 1 || input.w < 1)
    REMAT_USER_ERROR(where << "'" << l.size_of << "' and the input must both be images "
                                                  "[N, C, H, W]");
  if (target.h % input.h != 0 || target.w % input.w != 0)
    REMAT_USER_ERROR(where << "no integer factor takes the input's " << hw(input) << " to '"
                           << l.size_of << "''s " << hw(target));
  attrs.set("factor", std::vector<int64_t>{target.h / input.h, target.w / input.w});
}

}  // namespace

void resolve_size_attrs(const LayerConfig& l, AttrMap& attrs, const Graph& g,
                        const ChannelsLastPlacer& layouts,
                        const std::map<std::string, ValueId>& values) {
  const bool bins = attrs.has("bins");
  if (!bins && l.size_of.empty()) return;
  const ImageSize input = image_size(g, layouts, values.at(l.inputs.at(0)));
  if (bins) resolve_bins(l, attrs, input);
  if (!l.size_of.empty())
    resolve_size_of(l, attrs, input, image_size(g, layouts, values.at(l.size_of)));
}

}  // namespace remat

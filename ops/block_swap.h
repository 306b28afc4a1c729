// The permutations the transpose op takes (ops/layout.cpp), shared with the ONNX importer's
// Transpose: the batch stays first and two adjacent blocks of per-sample axes trade places.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace remat {

// Note [block swaps]
// perm = [0, 1 .. lead, lead + a + 1 .. lead + a + b, lead + 1 .. lead + a, the rest in order]:
// after the batch and `lead` axes that stay, a block of `a` axes and the block of `b` axes
// behind it trade places, and the axes behind both stay. Per sample that is a batch of
// [rows, cols] matrices whose elements are `inner`-element vectors, [.., rows, cols, inner] ->
// [.., cols, rows, inner] (rows the product of the first block's sizes, cols the second's). It
// holds PyTorch's permute(0, 2, 3, 1) of an image and back (lead 0, inner 1), transpose(1, 2)
// of tokens, k.transpose(-2, -1) of [N, G, T, D] (lead 1), a window partition's
// permute(0, 1, 3, 2, 4, 5) of [N, H / w, w, W / w, w, C] (lead 1, a = b = 1, inner w C) and
// Swin's patch merging as permute(0, 1, 3, 4, 2, 5) of [N, H / 2, 2, W / 2, 2, C] (lead 1,
// a = 1, b = 2, inner C). Its inverse swaps the blocks back: (lead, b, a).
struct BlockSwap {
  int64_t lead = 0, a = 0, b = 0;
};

inline std::vector<int64_t> block_swap_perm(int64_t rank, const BlockSwap& s) {
  std::vector<int64_t> p{0};
  for (int64_t d = 1; d <= s.lead; ++d) p.push_back(d);
  for (int64_t d = 0; d < s.b; ++d) p.push_back(s.lead + s.a + 1 + d);
  for (int64_t d = 0; d < s.a; ++d) p.push_back(s.lead + 1 + d);
  for (int64_t d = s.lead + s.a + s.b + 1; d < rank; ++d) p.push_back(d);
  return p;
}

// The block swap `perm` is, if it is one (the identity is not).
inline std::optional<BlockSwap> block_swap_of(const std::vector<int64_t>& perm) {
  const auto rank = static_cast<int64_t>(perm.size());
  for (int64_t lead = 0; lead < rank; ++lead)
    for (int64_t a = 1; lead + a + 1 < rank; ++a)
      for (int64_t b = 1; lead + a + b < rank; ++b)
        if (block_swap_perm(rank, {lead, a, b}) == perm) return BlockSwap{lead, a, b};
  return std::nullopt;
}

inline BlockSwap inverse(const BlockSwap& s) { return {s.lead, s.b, s.a}; }

// Any permutation that keeps the batch first as a chain of block swaps, applied in order (the
// fewest this greedy finds: at the first axis out of place, the longest run of the axes due
// there moves in front of it). Empty for the identity.
inline std::vector<BlockSwap> block_swaps_for(const std::vector<int64_t>& perm) {
  std::vector<int64_t> now;  // the original axis at each position after the swaps so far
  for (size_t d = 0; d < perm.size(); ++d) now.push_back(static_cast<int64_t>(d));
  const auto rank = static_cast<int64_t>(perm.size());
  std::vector<BlockSwap> out;
  for (int64_t d = 1; d < rank; ++d) {
    if (now[static_cast<size_t>(d)] == perm[static_cast<size_t>(d)]) continue;
    int64_t j = d + 1;
    while (now[static_cast<size_t>(j)] != perm[static_cast<size_t>(d)]) ++j;
    int64_t b = 1;
    while (j + b < rank && d + b < rank &&
           now[static_cast<size_t>(j + b)] == perm[static_cast<size_t>(d + b)])
      ++b;
    const BlockSwap s{d - 1, j - d, b};
    std::vector<int64_t> next;
    for (int64_t p : block_swap_perm(rank, s)) next.push_back(now[static_cast<size_t>(p)]);
    now = next;
    out.push_back(s);
  }
  return out;
}

}  // namespace remat

// Deterministic initial values of persistent tensors (He normal, Glorot uniform, zeros, ones),
// from a counter-based generator keyed by (seed, value name): platform-independent.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/graph/graph.h"

namespace remat {

// Writes v's initial values to out[0, numel).
void init_values(const Value& v, uint64_t seed, float* out);
// The same values, returned.
std::vector<float> init_values(const Value& v, uint64_t seed);

// splitmix64 step and a stable 64-bit hash of a string, shared by the data generators.
uint64_t mix64(uint64_t x);
uint64_t hash_string(const std::string& s, uint64_t seed);

}  // namespace remat

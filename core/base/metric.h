// Distance metrics and their ordering conventions.
//
// L2 is squared Euclidean distance (smaller is nearer). Inner product and cosine are
// similarities (larger is nearer); cosine is inner product over vectors normalised at insert
// and at query time. Internally every search minimises a "key": the distance for L2 and the
// negated similarity otherwise, so one top-k structure serves all metrics.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace shoal::core {

enum class Metric { kL2 = 1, kInnerProduct = 2, kCosine = 3 };

// True when larger values are nearer (inner product, cosine).
constexpr bool IsSimilarity(Metric m) { return m != Metric::kL2; }

// Converts between the reported distance and the minimised key; the map is its own inverse.
constexpr float ToKey(Metric m, float distance) { return IsSimilarity(m) ? -distance : distance; }
constexpr float FromKey(Metric m, float key) { return IsSimilarity(m) ? -key : key; }

std::string_view MetricName(Metric m);
absl::StatusOr<Metric> ParseMetric(std::string_view name);

// Scales `v` to unit length in place; a zero vector stays zero.
void NormalizeInPlace(float* v, size_t dim);

}  // namespace shoal::core

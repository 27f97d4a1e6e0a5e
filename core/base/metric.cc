#include "core/base/metric.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shoal::core {

std::string_view MetricName(Metric m) {
  switch (m) {
    case Metric::kL2:
      return "l2";
    case Metric::kInnerProduct:
      return "ip";
    case Metric::kCosine:
      return "cosine";
  }
  return "unknown";
}

absl::StatusOr<Metric> ParseMetric(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "l2") return Metric::kL2;
  if (lower == "ip" || lower == "inner_product" || lower == "dot") return Metric::kInnerProduct;
  if (lower == "cosine" || lower == "cos") return Metric::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("metric: unknown metric '", std::string(name), "' (want l2, ip or cosine)"));
}

void NormalizeInPlace(float* v, size_t dim) {
  double sum = 0;
  for (size_t i = 0; i < dim; ++i) sum += double(v[i]) * v[i];
  if (sum <= 0) return;
  // In double: 1 / |v| overflows float for a tiny |v| (1e-39 -> inf, then inf * 0 = NaN),
  // while every v[i] / |v| is in [-1, 1].
  const double inv = 1.0 / std::sqrt(sum);
  for (size_t i = 0; i < dim; ++i) v[i] = float(double(v[i]) * inv);
}

}  // namespace shoal::core

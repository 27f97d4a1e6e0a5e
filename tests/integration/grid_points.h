// Grid: deterministic points for the server's integration tests (ids first..first+n, small
// integer coordinates, so exact distances tie in known ways).
#pragma once

#include <cstdint>
#include <vector>

#include "client/client.h"

namespace shoal::testing {

inline std::vector<Point> Grid(uint64_t first, uint64_t n, uint32_t dim) {
  std::vector<Point> points;
  for (uint64_t i = first; i < first + n; ++i) {
    Point p;
    p.id = i;
    for (uint32_t j = 0; j < dim; ++j) p.vector.push_back(float((i * 31 + j * 7) % 97));
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace shoal::testing

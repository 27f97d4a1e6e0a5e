#include "client/shoalctl/output.h"

#include <cstdio>
#include <iostream>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace shoal::ctl {

const char kExitCodesHelp[] =
    "Exit codes:\n"
    "  0  success\n"
    "  1  usage: bad flags or arguments, an unreadable input file, no shoal-bench\n"
    "  2  not found (NOT_FOUND); `health` of an unknown collection\n"
    "  3  conflict with the server's state (ALREADY_EXISTS, FAILED_PRECONDITION, ABORTED)\n"
    "  4  request rejected (INVALID_ARGUMENT, OUT_OF_RANGE)\n"
    "  5  unavailable, retry later (UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,\n"
    "     CANCELLED); `health` answered NOT_SERVING\n"
    "  6  not allowed (UNAUTHENTICATED, PERMISSION_DENIED)\n"
    "  7  server error (INTERNAL, DATA_LOSS, UNKNOWN, UNIMPLEMENTED)\n";

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return kExitConflict;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitRejected;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitPermission;
    default:
      return kExitServerError;
  }
}

int Fail(const absl::Status& status) {
  std::cerr << "shoalctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return ExitCodeFor(status);
}

int UsageError(const absl::Status& status) {
  std::cerr << "shoalctl: " << status.message() << "\n";
  return kExitUsage;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += char(c);
    }
  }
  out += '"';
  return out;
}

namespace {

std::string JsonFloat(double v) { return absl::StrFormat("%.9g", v); }

std::string StateText(const CollectionInfo& c) {
  if (c.index_state != "building") return c.index_state;
  return absl::StrFormat("building (%s %u%%)", c.build_phase, c.build_percent);
}

std::string CollectionJson(const CollectionInfo& c) {
  return absl::StrCat(
      "{\"name\": ", JsonString(c.name), ", \"dim\": ", c.dim,
      ", \"metric\": ", JsonString(MetricName(c.metric)),
      ", \"index\": {\"type\": ", JsonString(IndexTypeName(c.index.type)),
      ", \"nlist\": ", c.index.nlist, ", \"pq_m\": ", c.index.pq_m,
      ", \"pq_bits\": ", c.index.pq_bits, ", \"default_nprobe\": ", c.index.default_nprobe,
      "}, \"num_vectors\": ", c.num_vectors, ", \"num_indexed\": ", c.num_indexed,
      ", \"num_segments\": ", c.num_segments, ", \"index_state\": ", JsonString(c.index_state),
      ", \"build_phase\": ", JsonString(c.build_phase), ", \"build_percent\": ", c.build_percent,
      ", \"disk_bytes\": ", c.disk_bytes,
      ", \"attribute_memory_bytes\": ", c.attribute_memory_bytes,
      ", \"error\": ", JsonString(c.error), "}");
}

std::string ScalarJson(const AttributeScalar& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return absl::StrCat(*i);
  if (const auto* d = std::get_if<double>(&v)) return JsonFloat(*d);
  if (const auto* s = std::get_if<std::string>(&v)) return JsonString(*s);
  return std::get<bool>(v) ? "true" : "false";
}

std::string AttributeJson(const AttributeValue& v) {
  if (const auto* list = std::get_if<AttributeList>(&v)) {
    std::vector<std::string> parts;
    for (const AttributeScalar& element : *list) parts.push_back(ScalarJson(element));
    return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
  }
  return std::visit(
      [](const auto& scalar) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(scalar)>, AttributeList>) {
          return "";
        } else {
          return ScalarJson(scalar);
        }
      },
      v);
}

std::string AttributesJson(const Attributes& attrs) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : attrs)
    parts.push_back(absl::StrCat(JsonString(k), ": ", AttributeJson(v)));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

std::string VectorJson(const std::vector<float>& v) {
  std::vector<std::string> parts;
  for (float x : v) parts.push_back(JsonFloat(x));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string StatsJson(const QueryStats& s) {
  return absl::StrCat(
      "{\"partitions_probed\": ", s.partitions_probed,
      ", \"partitions_cached\": ", s.partitions_cached, ", \"bytes_read\": ", s.bytes_read,
      ", \"vectors_scanned\": ", s.vectors_scanned, ", \"queue_us\": ", s.queue_us,
      ", \"io_us\": ", s.io_us, ", \"cpu_us\": ", s.cpu_us,
      s.plan.empty()
          ? std::string()
          : absl::StrCat(", \"plan\": ", JsonString(s.plan), ", \"rows_matched\": ", s.rows_matched,
                         ", \"partitions_skipped\": ", s.partitions_skipped,
                         ", \"matching_rows_scanned\": ", s.matching_rows_scanned),
      "}");
}

void PrintCollectionRow(const CollectionInfo& c) {
  std::printf("%-20s %6u %-6s %-8s %10llu %10llu %-24s %9.1f\n", c.name.c_str(), c.dim,
              MetricName(c.metric).c_str(), IndexTypeName(c.index.type).c_str(),
              (unsigned long long)c.num_vectors, (unsigned long long)c.num_indexed,
              StateText(c).c_str(), double(c.disk_bytes) / (1 << 20));
  if (!c.error.empty()) std::printf("%-20s error: %s\n", "", c.error.c_str());
}

void PrintCollectionHeader() {
  std::printf("%-20s %6s %-6s %-8s %10s %10s %-24s %9s\n", "NAME", "DIM", "METRIC", "INDEX",
              "VECTORS", "INDEXED", "STATE", "DISK_MIB");
}

}  // namespace

void PrintCollections(Format format, const std::vector<CollectionInfo>& collections) {
  if (format == Format::kJson) {
    std::vector<std::string> parts;
    for (const auto& c : collections) parts.push_back(CollectionJson(c));
    std::printf("{\"collections\": [%s]}\n", absl::StrJoin(parts, ", ").c_str());
    return;
  }
  if (collections.empty()) {
    std::printf("no collections\n");
    return;
  }
  PrintCollectionHeader();
  for (const auto& c : collections) PrintCollectionRow(c);
}

void PrintCollection(Format format, const CollectionInfo& info) {
  if (format == Format::kJson) {
    std::printf("%s\n", CollectionJson(info).c_str());
    return;
  }
  PrintCollectionHeader();
  PrintCollectionRow(info);
}

void PrintSearchResults(Format format, const std::vector<SearchResult>& results, size_t first_query,
                        bool stats) {
  if (format == Format::kJson) {
    std::vector<std::string> parts;
    for (size_t q = 0; q < results.size(); ++q) {
      std::vector<std::string> hits;
      for (const Hit& h : results[q].hits) {
        hits.push_back(
            absl::StrCat("{\"id\": ", h.id, ", \"distance\": ", JsonFloat(h.distance), "}"));
      }
      parts.push_back(absl::StrCat("{\"query\": ", first_query + q, ", \"hits\": [",
                                   absl::StrJoin(hits, ", "),
                                   "], \"stats\": ", StatsJson(results[q].stats), "}"));
    }
    std::printf("{\"results\": [%s]}\n", absl::StrJoin(parts, ", ").c_str());
    return;
  }
  std::printf("%-6s %-5s %-12s %s\n", "QUERY", "RANK", "ID", "DISTANCE");
  for (size_t q = 0; q < results.size(); ++q) {
    const SearchResult& r = results[q];
    for (size_t i = 0; i < r.hits.size(); ++i) {
      std::printf("%-6zu %-5zu %-12llu %g\n", first_query + q, i + 1,
                  (unsigned long long)r.hits[i].id, r.hits[i].distance);
    }
    if (stats) {
      const QueryStats& s = r.stats;
      std::printf(
          "  query %zu: %u partitions probed (%u from cache), %llu bytes read, %llu vectors "
          "scanned; queue %lluus io %lluus cpu %lluus\n",
          first_query + q, s.partitions_probed, s.partitions_cached,
          (unsigned long long)s.bytes_read, (unsigned long long)s.vectors_scanned,
          (unsigned long long)s.queue_us, (unsigned long long)s.io_us,
          (unsigned long long)s.cpu_us);
      if (!s.plan.empty()) {
        std::printf(
            "  filter: plan %s, %llu points match, %u partitions passed over, %llu "
            "matching points scanned\n",
            s.plan.c_str(), (unsigned long long)s.rows_matched, s.partitions_skipped,
            (unsigned long long)s.matching_rows_scanned);
      }
    }
  }
}

void PrintPoints(Format format, const std::vector<Point>& points, bool vectors) {
  if (format == Format::kJson) {
    std::vector<std::string> parts;
    for (const Point& p : points) {
      std::string item = absl::StrCat("{\"id\": ", p.id);
      if (vectors) absl::StrAppend(&item, ", \"vector\": ", VectorJson(p.vector));
      absl::StrAppend(&item, ", \"attributes\": ", AttributesJson(p.attributes), "}");
      parts.push_back(std::move(item));
    }
    std::printf("{\"points\": [%s]}\n", absl::StrJoin(parts, ", ").c_str());
    return;
  }
  std::printf("%-12s %s\n", "ID", vectors ? "VECTOR" : "ATTRIBUTES");
  for (const Point& p : points) {
    std::string rest;
    if (vectors) {
      rest = absl::StrCat("[", absl::StrJoin(p.vector, ","), "]");
    } else {
      std::vector<std::string> kv;
      for (const auto& [k, v] : p.attributes) kv.push_back(absl::StrCat(k, "=", AttributeJson(v)));
      rest = absl::StrJoin(kv, " ");
    }
    std::printf("%-12llu %s\n", (unsigned long long)p.id, rest.c_str());
  }
}

void PrintHealth(Format format, const std::string& status) {
  if (format == Format::kJson) {
    std::printf("{\"status\": %s}\n", JsonString(status).c_str());
  } else {
    std::printf("%s\n", status.c_str());
  }
}

void PrintCount(Format format, uint64_t count) {
  if (format == Format::kJson) {
    std::printf("{\"count\": %llu}\n", (unsigned long long)count);
  } else {
    std::printf("%llu\n", (unsigned long long)count);
  }
}

void PrintMessage(Format format, const std::string& message) {
  if (format == Format::kJson) {
    std::printf("{\"ok\": true, \"message\": %s}\n", JsonString(message).c_str());
  } else {
    std::printf("%s\n", message.c_str());
  }
}

}  // namespace shoal::ctl

// A program outside the Shoal tree: creates a collection, upserts, searches with SearchAsync
// (future and callback) and SearchMany, then drops it. Prints "consumer ok" on success.
//   consumer <host:port>
#include <shoal/client.h>

#include <cstdio>
#include <future>
#include <vector>

namespace {

int Check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "consumer: %s failed\n", what);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer <host:port>\n");
    return 2;
  }
  shoal::ClientOptions options;
  options.timeout = std::chrono::seconds(10);
  shoal::Client client(argv[1], options);
  if (Check(client.CreateCollection({.name = "consumer", .dim = 3}).ok(), "create")) return 1;
  std::vector<shoal::Point> points;
  std::vector<std::vector<float>> queries;
  for (int i = 0; i < 100; ++i) {
    points.push_back({.id = uint64_t(i), .vector = {float(i), float(i), float(i)}});
    queries.push_back({float(i), float(i), float(i)});
  }
  if (Check(client.Upsert("consumer", points).ok(), "upsert")) return 1;

  auto future = client.SearchAsync("consumer", {5, 5, 5}, {.k = 1});
  std::promise<uint64_t> via_callback;
  client.SearchAsync("consumer", {6, 6, 6}, {.k = 1}, [&](absl::StatusOr<shoal::SearchResult> r) {
    via_callback.set_value(r.ok() ? r->hits[0].id : ~0ull);
  });
  auto first = future.get();
  if (Check(first.ok() && first->hits[0].id == 5, "SearchAsync (future)")) return 1;
  if (Check(via_callback.get_future().get() == 6, "SearchAsync (callback)")) return 1;

  auto all = client.SearchMany("consumer", queries, {.k = 1}, {.batch = 8, .in_flight = 3});
  if (Check(all.ok() && all->size() == queries.size(), "SearchMany")) return 1;
  for (size_t i = 0; i < all->size(); ++i) {
    if (Check((*all)[i].hits[0].id == i, "SearchMany order")) return 1;
  }
  if (Check(client.DropCollection("consumer").ok(), "drop")) return 1;
  std::printf("consumer ok\n");
  return 0;
}

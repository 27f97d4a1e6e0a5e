// shoal::Client::SearchMany over SearchStream: one stream, `many.batch` queries per message and
// at most `many.in_flight` messages unanswered; answers arrive in completion order and are
// placed by their tag (the message's index). A server without SearchStream (UNIMPLEMENTED) is
// searched with unary requests instead (SearchManyUnary).
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "client/convert.h"

namespace shoal {
namespace {

using client_internal::FromGrpc;

absl::StatusOr<std::vector<SearchResult>> SearchManyStream(
    Client::Impl* impl, const std::string& collection,
    const std::vector<std::vector<float>>& queries, const SearchOptions& options,
    const SearchManyOptions& many) {
  const size_t batch = std::max<size_t>(1, many.batch);
  const size_t window = std::max<size_t>(1, many.in_flight);
  const size_t messages = (queries.size() + batch - 1) / batch;
  std::vector<SearchResult> results(queries.size());
  if (messages == 0) return results;
  // Each message has the call timeout of its own (timeout_ms); the stream as long as the
  // messages need one window after another.
  const std::chrono::milliseconds per_message = impl->options.timeout;
  grpc::ClientContext ctx;
  impl->Prepare(&ctx, per_message * int64_t((messages + window - 1) / window + 1));
  auto stream = impl->stub->SearchStream(&ctx);
  std::vector<bool> answered(messages, false);
  size_t sent = 0, received = 0;
  bool writes_done = false;
  absl::Status first_error;
  while (received < sent || (sent < messages && first_error.ok())) {
    while (first_error.ok() && sent < messages && sent - received < window) {
      v1::SearchRequest req =
          client_internal::MakeSearchRequest(collection, queries, sent * batch, batch, options);
      req.set_tag(sent);
      req.set_timeout_ms(uint32_t(std::min<int64_t>(per_message.count(), UINT32_MAX)));
      if (!stream->Write(req)) break;  // the stream broke: Finish() says why
      ++sent;
    }
    if (!writes_done && (sent == messages || !first_error.ok())) {
      writes_done = true;
      stream->WritesDone();
    }
    if (received == sent) break;  // a write failed with nothing in flight
    v1::SearchResponse resp;
    if (!stream->Read(&resp)) break;
    ++received;
    if (resp.tag() >= messages || answered[resp.tag()]) {
      if (first_error.ok()) {
        first_error = absl::InternalError(
            absl::StrCat("SearchStream answered tag ", resp.tag(), ", which was not asked"));
      }
      continue;
    }
    answered[resp.tag()] = true;
    if (resp.has_error()) {
      if (first_error.ok()) {
        first_error =
            FromGrpc(grpc::Status(grpc::StatusCode(resp.error().code()), resp.error().message()));
      }
      continue;
    }
    const size_t first = resp.tag() * batch, count = std::min(batch, queries.size() - first);
    auto got = client_internal::FromProto(resp, count);
    if (!got.ok()) {
      if (first_error.ok()) first_error = got.status();
      continue;
    }
    std::move(got->begin(), got->end(), results.begin() + ptrdiff_t(first));
  }
  if (!writes_done) stream->WritesDone();
  if (!first_error.ok()) ctx.TryCancel();  // answers still owed are not wanted
  absl::Status finished = FromGrpc(stream->Finish());
  if (!first_error.ok()) return first_error;
  if (!finished.ok()) return finished;
  if (received < messages) return absl::InternalError("SearchStream ended before every answer");
  return results;
}

}  // namespace

absl::StatusOr<std::vector<SearchResult>> Client::SearchMany(
    const std::string& collection, const std::vector<std::vector<float>>& queries,
    const SearchOptions& options, const SearchManyOptions& many) {
  if (!impl_->init_status.ok()) return impl_->init_status;
  auto streamed = SearchManyStream(impl_.get(), collection, queries, options, many);
  if (streamed.status().code() != absl::StatusCode::kUnimplemented) return streamed;
  return SearchManyUnary(impl_.get(), collection, queries, options, many);
}

}  // namespace shoal

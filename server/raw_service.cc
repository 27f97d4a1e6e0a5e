#include "server/raw_service.h"

#include <exception>

#include "server/unary_reactor.h"

namespace shoal::server {

template <typename Request, typename Response>
grpc::ServerUnaryReactor* RawShoalService::Unary(
    Ctx* ctx, const char* method, const Bytes& raw, Bytes* wire,
    void (ShoalService::*handler)(Ctx*, UnaryReactor*, const Request*, Response*)) {
  auto* r = new RawUnaryReactor<Request, Response>(service_->metrics(), method,
                                                   CancelTokenFor(*ctx), wire);
  absl::Status parsed = ParseRaw(raw, r->request());
  if (!parsed.ok()) {
    r->FinishWith(parsed);
    return r;
  }
  // Handlers hand their work on as their last step, so an exception here happened before
  // anything else could finish the call. FinishWith ignores a second finish regardless.
  try {
    (service_->*handler)(ctx, r, r->request(), r->response());
  } catch (const std::exception& e) {
    r->FinishWith(InternalErrorIn(method, e.what()));
  } catch (...) {
    r->FinishWith(InternalErrorIn(method, "unknown exception"));
  }
  return r;
}

grpc::ServerUnaryReactor* RawShoalService::CreateCollection(Ctx* ctx, const Bytes* req,
                                                            Bytes* resp) {
  return Unary(ctx, "CreateCollection", *req, resp, &ShoalService::CreateCollection);
}

grpc::ServerUnaryReactor* RawShoalService::DropCollection(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "DropCollection", *req, resp, &ShoalService::DropCollection);
}

grpc::ServerUnaryReactor* RawShoalService::ListCollections(Ctx* ctx, const Bytes* req,
                                                           Bytes* resp) {
  return Unary(ctx, "ListCollections", *req, resp, &ShoalService::ListCollections);
}

grpc::ServerUnaryReactor* RawShoalService::DescribeCollection(Ctx* ctx, const Bytes* req,
                                                              Bytes* resp) {
  return Unary(ctx, "DescribeCollection", *req, resp, &ShoalService::DescribeCollection);
}

grpc::ServerUnaryReactor* RawShoalService::Upsert(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Upsert", *req, resp, &ShoalService::Upsert);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* RawShoalService::SearchStream(
    Ctx* ctx) {
  return service_->SearchStream(ctx);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* RawShoalService::UpsertStream(Ctx* ctx, Bytes* resp) {
  return service_->UpsertStream(ctx, resp);
}

grpc::ServerUnaryReactor* RawShoalService::Delete(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Delete", *req, resp, &ShoalService::Delete);
}

grpc::ServerUnaryReactor* RawShoalService::Get(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Get", *req, resp, &ShoalService::Get);
}

grpc::ServerUnaryReactor* RawShoalService::Search(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Search", *req, resp, &ShoalService::Search);
}

grpc::ServerUnaryReactor* RawShoalService::Count(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Count", *req, resp, &ShoalService::Count);
}

grpc::ServerUnaryReactor* RawShoalService::BuildIndex(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "BuildIndex", *req, resp, &ShoalService::BuildIndex);
}

grpc::ServerUnaryReactor* RawShoalService::Flush(Ctx* ctx, const Bytes* req, Bytes* resp) {
  return Unary(ctx, "Flush", *req, resp, &ShoalService::Flush);
}

}  // namespace shoal::server

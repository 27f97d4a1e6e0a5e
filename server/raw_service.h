// RawShoalService: the shoal.v1.Shoal service as gRPC sees it. Every method is registered as a
// raw (ByteBuffer) callback method, so Shoal parses requests itself:
//
//   - bytes that do not parse answer INVALID_ARGUMENT "request does not parse as
//     shoal.v1.SearchRequest". (gRPC 1.51's generated callback handlers answer UNIMPLEMENTED
//     with an empty message before any of Shoal's code runs; UNIMPLEMENTED now means only a
//     method that does not exist.)
//   - an exception from a handler never reaches gRPC (which would answer UNIMPLEMENTED, or end
//     the process): it answers INTERNAL naming the method.
//
// The parsed request and the response live in the call's RawUnaryReactor until gRPC is done
// with it; the handlers proper are ShoalService's.
//
// Thread-safety: as ShoalService; the object only forwards.
#pragma once

#include <grpcpp/grpcpp.h>

#include "server/shoal_service.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace shoal::server {

// Every method of the service, raw.
using RawShoalBase = v1::Shoal::WithRawCallbackMethod_CreateCollection<
    v1::Shoal::WithRawCallbackMethod_DropCollection<
        v1::Shoal::WithRawCallbackMethod_ListCollections<
            v1::Shoal::WithRawCallbackMethod_DescribeCollection<
                v1::Shoal::WithRawCallbackMethod_Upsert<
                    v1::Shoal::WithRawCallbackMethod_UpsertStream<
                        v1::Shoal::WithRawCallbackMethod_Delete<
                            v1::Shoal::WithRawCallbackMethod_Get<
                                v1::Shoal::WithRawCallbackMethod_Search<
                                    v1::Shoal::WithRawCallbackMethod_Count<
                                        v1::Shoal::WithRawCallbackMethod_SearchStream<
                                            v1::Shoal::WithRawCallbackMethod_BuildIndex<
                                                v1::Shoal::WithRawCallbackMethod_Flush<
                                                    v1::Shoal::Service>>>>>>>>>>>>>;

class RawShoalService final : public RawShoalBase {
 public:
  // REQUIRES: `service` outlives this object.
  explicit RawShoalService(ShoalService* service) : service_(service) {}

  using Ctx = grpc::CallbackServerContext;
  using Bytes = grpc::ByteBuffer;

  grpc::ServerUnaryReactor* CreateCollection(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* DropCollection(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* ListCollections(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* DescribeCollection(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* Upsert(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerReadReactor<Bytes>* UpsertStream(Ctx* ctx, Bytes* resp) override;
  grpc::ServerUnaryReactor* Delete(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* Get(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* Search(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* Count(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerBidiReactor<Bytes, Bytes>* SearchStream(Ctx* ctx) override;
  grpc::ServerUnaryReactor* BuildIndex(Ctx* ctx, const Bytes* req, Bytes* resp) override;
  grpc::ServerUnaryReactor* Flush(Ctx* ctx, const Bytes* req, Bytes* resp) override;

 private:
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Unary(Ctx* ctx, const char* method, const Bytes& raw, Bytes* wire,
                                  void (ShoalService::*handler)(Ctx*, UnaryReactor*, const Request*,
                                                                Response*));

  ShoalService* const service_;
};

}  // namespace shoal::server

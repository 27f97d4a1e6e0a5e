// RawCall: one unary call of the Shoal service with arbitrary request bytes, through
// grpc::GenericStub — what no client library would send, for the hostile-request tests and
// the service fuzzer.
//
// Thread-safety: a GenericStub may be shared; each RawCall is independent.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

namespace shoal::testing {

// The unary methods of shoal.v1.Shoal (UpsertStream is client-streaming).
inline const std::vector<std::string>& ShoalUnaryMethods() {
  static const std::vector<std::string> methods = {"CreateCollection",
                                                   "DropCollection",
                                                   "ListCollections",
                                                   "DescribeCollection",
                                                   "Upsert",
                                                   "Delete",
                                                   "Get",
                                                   "Search",
                                                   "BuildIndex",
                                                   "Flush"};
  return methods;
}

// Calls /shoal.v1.Shoal/<method> with `request` as the serialised message; the response's
// bytes go to *response when given.
inline grpc::Status RawCall(grpc::GenericStub& stub, const std::string& method,
                            const std::string& request, std::string* response = nullptr,
                            std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/shoal.v1.Shoal/" + method, grpc::StubOptions(), &in, &out,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status status = done.get_future().get();
  if (response && status.ok()) {
    std::vector<grpc::Slice> slices;
    response->clear();
    if (out.Dump(&slices).ok()) {
      for (const auto& s : slices)
        response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

// A client-streaming call of /shoal.v1.Shoal/<method> with `messages` as the serialised
// messages (e.g. UpsertStream).
inline grpc::Status RawStreamCall(grpc::GenericStub& stub, const std::string& method,
                                  const std::vector<std::string>& messages,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, "/shoal.v1.Shoal/" + method, &cq);
  void* tag;
  bool ok = false;
  auto step = [&] { return cq.Next(&tag, &ok) && ok; };
  call->StartCall(nullptr);
  bool open = step();
  for (const std::string& m : messages) {
    if (!open) break;
    grpc::Slice slice(m);
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    open = step();  // false once the server has finished the call
  }
  if (open) {
    call->WritesDone(nullptr);
    step();
  }
  grpc::ByteBuffer response;
  call->Read(&response, nullptr);
  step();
  grpc::Status status;
  call->Finish(&status, nullptr);
  step();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

}  // namespace shoal::testing

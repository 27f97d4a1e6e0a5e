// Server credentials for gRPC from shoald's config: plaintext, TLS (server.tls_cert / tls_key)
// or mutual TLS (plus server.tls_client_ca: clients must present a certificate it signed).
// The PEM files are read and checked here (the certificate parses, the key parses and belongs
// to it), so a bad file is an INVALID_ARGUMENT naming the setting rather than a port that
// silently fails to open.
//
// Thread-safety: stateless functions.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/config.h"

namespace shoal::server {

// InsecureServerCredentials() when config.tls_cert is empty.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const Config& config);

// The whole file; INVALID_ARGUMENT naming `field` when it cannot be read or is empty.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* field);

}  // namespace shoal::server

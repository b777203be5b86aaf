// TLS for Folio's gRPC servers and clients: --tls_cert, --tls_key, --tls_ca (every binary
// that calls TlsConfigFromFlags has them) and the credentials they give.
//
//   - none set: plaintext (insecure credentials), as before;
//   - cert + key: servers speak TLS with that certificate; clients check servers against
//     --tls_ca (or the system roots without one);
//   - cert + key + CA: mutual TLS. Servers require a client certificate signed by the CA,
//     and clients present theirs (the same --tls_cert/--tls_key), so the internal services
//     authenticate each other.
// --tls_server_name overrides the name clients expect in server certificates (one
// certificate for every service, e.g. in Kubernetes); empty: the host of the target.
//
// Free functions; thread-safe.
#ifndef FOLIO_COMMON_TLS_H_
#define FOLIO_COMMON_TLS_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_server_name);

namespace folio {

struct TlsConfig {
  std::string cert_file;    // PEM certificate chain
  std::string key_file;     // PEM private key
  std::string ca_file;      // PEM CA certificates; set: mutual TLS
  std::string server_name;  // clients: the name server certificates must carry (override)
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// The flags above. InvalidArgument when they do not go together (a cert without its key,
// a CA without a certificate).
absl::StatusOr<TlsConfig> TlsConfigFromFlags();

// TlsConfigFromFlags, with its files read once to check them; on a bad flag or an
// unreadable file, logs why and exits with 2 (bad flags), as the mains do.
TlsConfig TlsConfigFromFlagsOrExit();

// Server credentials: insecure when TLS is off; InvalidArgument for unreadable files.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls);

// A channel to `target` with `tls` (insecure when off); `args` may add channel arguments.
// InvalidArgument for unreadable files (never after TlsConfigFromFlagsOrExit).
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const TlsConfig& tls,
    grpc::ChannelArguments args = grpc::ChannelArguments());

}  // namespace folio

#endif  // FOLIO_COMMON_TLS_H_

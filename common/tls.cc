#include "common/tls.h"

#include <cstdlib>
#include <fstream>
#include <utility>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this service: with --tls_key, its gRPC server speaks TLS "
          "(and, with --tls_ca, its gRPC clients present it).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificates. Clients check servers against it; servers then require client "
          "certificates it signed (mutual TLS between the services).");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name gRPC clients expect in server certificates (default: the target's host).");

namespace folio {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the TLS ", what, " ", path));
  std::stringstream s;
  s << in.rdbuf();
  if (s.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the TLS ", what, " ", path, " is not PEM"));
  }
  return s.str();
}

}  // namespace

absl::StatusOr<TlsConfig> TlsConfigFromFlags() {
  TlsConfig tls{absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_server_name)};
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key go together");
  }
  if (!tls.ca_file.empty() && tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls_ca needs --tls_cert and --tls_key (mutual TLS)");
  }
  return tls;
}

TlsConfig TlsConfigFromFlagsOrExit() {
  absl::StatusOr<TlsConfig> tls = TlsConfigFromFlags();
  absl::Status status = tls.status();
  if (status.ok() && tls->enabled()) {
    for (const auto& [path, what] : {std::pair{tls->cert_file, "certificate"},
                                     std::pair{tls->key_file, "key"},
                                     std::pair{tls->ca_file, "CA"}}) {
      if (path.empty()) continue;
      absl::StatusOr<std::string> pem = ReadPem(path, what);
      if (!pem.ok()) status = pem.status();
    }
  }
  if (!status.ok()) {
    LOG(ERROR) << status.message();
    std::exit(2);
  }
  return *tls;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadPem(tls.cert_file, "certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(tls.key_file, "key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls.ca_file, "CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                          const TlsConfig& tls,
                                                          grpc::ChannelArguments args) {
  if (!tls.enabled()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(tls.ca_file, "CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    absl::StatusOr<std::string> cert = ReadPem(tls.cert_file, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(tls.key_file, "key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(options), args);
}

}  // namespace folio

// ApiKeys: the optional API keys that guard the public APIs (HTTP and gRPC). When any key
// is configured, every request must carry one as "Authorization: Bearer <key>" (an HTTP
// header, or the gRPC metadata entry "authorization"); health checks stay open.
//
// Immutable after Create; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_API_KEYS_H_
#define FOLIO_SERVICES_FRONTEND_API_KEYS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace folio::frontend {

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: everything is allowed

  // `keys` plus the keys in `key_file` (when not empty): one per line, surrounding
  // whitespace trimmed, empty lines and lines starting with '#' skipped. NotFound when the
  // file cannot be read; InvalidArgument when a key has whitespace or control characters
  // inside, or when the file names no key at all.
  static absl::StatusOr<ApiKeys> Create(std::vector<std::string> keys,
                                        const std::string& key_file);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // OK when keys are off or `authorization` is "Bearer <a configured key>" (the scheme is
  // case-insensitive). Unauthenticated otherwise, saying whether the key was missing or
  // wrong. Compares in time independent of where a wrong key differs.
  absl::Status Check(std::optional<std::string_view> authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_API_KEYS_H_

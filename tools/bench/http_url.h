// http://HOST:PORT[/PATH] URLs as folio-bench's HTTP clients take them.
#ifndef FOLIO_TOOLS_BENCH_HTTP_URL_H_
#define FOLIO_TOOLS_BENCH_HTTP_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace folio::bench {

struct HttpUrl {
  std::string host;
  int port = 80;
  std::string path;  // "/" when the URL has none
};

// InvalidArgument (naming the URL) for anything but plain http with a host; https is
// refused since the clients speak no TLS.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_HTTP_URL_H_

#include "tools/bench/http_url.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace folio::bench {

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad URL '", url, "': ", why));
  };
  constexpr absl::string_view kScheme = "http://";
  if (absl::StartsWith(url, "https://")) return bad("https is not supported; use http://");
  if (!absl::StartsWith(url, kScheme)) return bad("expected http://HOST[:PORT][/PATH]");
  absl::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  HttpUrl out;
  out.path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  absl::string_view port;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:PORT
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return bad("unclosed '['");
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("expected ':' after ']'");
    if (!after.empty()) port = after.substr(1);
    if (after.size() == 1) return bad("empty port");
    authority = authority.substr(1, close - 1);
  } else if (const size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    port = authority.substr(colon + 1);
    if (port.empty()) return bad("empty port");
    authority = authority.substr(0, colon);
  }
  if (!port.empty() && (!absl::SimpleAtoi(port, &out.port) || out.port <= 0 || out.port > 65535)) {
    return bad(absl::StrCat("bad port '", port, "'"));
  }
  if (authority.empty()) return bad("no host");
  out.host = std::string(authority);
  return out;
}

}  // namespace folio::bench

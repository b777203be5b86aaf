#include "services/frontend/api_keys.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace folio::frontend {
namespace {

// Time independent of where the strings differ (a key's length is not treated as secret).
bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && absl::ascii_isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Create(std::vector<std::string> keys,
                                        const std::string& key_file) {
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the API key file ", key_file));
    std::string line;
    size_t from_file = 0;
    while (std::getline(in, line)) {
      std::string_view key = Trim(line);
      if (key.empty() || key[0] == '#') continue;
      keys.emplace_back(key);
      ++from_file;
    }
    if (from_file == 0) {
      return absl::InvalidArgumentError(absl::StrCat("the API key file ", key_file, " holds no key"));
    }
  }
  ApiKeys out;
  for (std::string& key : keys) {
    if (key.empty()) continue;
    for (unsigned char c : key) {
      if (c <= 0x20 || c == 0x7f) {
        return absl::InvalidArgumentError(
            "an API key has whitespace or a control character in it");
      }
    }
    out.keys_.push_back(std::move(key));
  }
  return out;
}

absl::Status ApiKeys::Check(std::optional<std::string_view> authorization) const {
  if (keys_.empty()) return absl::OkStatus();
  if (!authorization.has_value() || authorization->empty()) {
    return absl::UnauthenticatedError(
        "missing API key: send the header 'Authorization: Bearer <key>'");
  }
  std::string_view value = Trim(*authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(absl::string_view(value.data(), kScheme.size()),
                              absl::string_view(kScheme.data(), kScheme.size()))) {
    return absl::UnauthenticatedError(
        "the Authorization header must be 'Bearer <key>'");
  }
  const std::string_view given = Trim(value.substr(kScheme.size()));
  bool ok = false;
  for (const std::string& key : keys_) ok |= ConstantTimeEqual(given, key);
  if (!ok) return absl::UnauthenticatedError("invalid API key");
  return absl::OkStatus();
}

}  // namespace folio::frontend

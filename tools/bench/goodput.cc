#include "tools/bench/goodput.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace folio::bench {

absl::StatusOr<Slo> ParseSlo(absl::string_view spec) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad --goodput '", spec, "': ", why, " (expected ttft:MS,tpot:MS,e2e:MS, any subset)"));
  };
  if (spec.empty()) return bad("empty");
  Slo slo;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    const size_t colon = part.find(':');
    if (colon == absl::string_view::npos) return bad(absl::StrCat("'", part, "' has no ':'"));
    const absl::string_view key = part.substr(0, colon), value = part.substr(colon + 1);
    double ms = 0;
    if (!absl::SimpleAtod(value, &ms) || !std::isfinite(ms) || ms <= 0) {
      return bad(absl::StrCat("the bound of ", key, " ('", value,
                              "') must be a positive number of milliseconds"));
    }
    std::optional<double>* field = key == "ttft"   ? &slo.ttft_ms
                                   : key == "tpot" ? &slo.tpot_ms
                                   : key == "e2e"  ? &slo.e2e_ms
                                                   : nullptr;
    if (field == nullptr) {
      return bad(absl::StrCat("unknown objective '", key, "' (ttft, tpot or e2e)"));
    }
    if (field->has_value()) return bad(absl::StrCat(key, " is given twice"));
    *field = ms;
  }
  return slo;
}

bool MeetsSlo(const RequestResult& r, const Slo& slo) {
  if (!r.sent || !r.ok || r.output_tokens < 1) return false;
  if (slo.ttft_ms && r.ttft_s * 1e3 > *slo.ttft_ms) return false;
  if (slo.e2e_ms && r.e2e_s * 1e3 > *slo.e2e_ms) return false;
  if (slo.tpot_ms && r.output_tokens > 1 &&
      (r.e2e_s - r.ttft_s) / (r.output_tokens - 1) * 1e3 > *slo.tpot_ms) {
    return false;
  }
  return true;
}

nlohmann::json Goodput(const std::vector<RequestResult>& results, double duration_s,
                       const Slo& slo) {
  int sent = 0, good = 0;
  for (const RequestResult& r : results) {
    if (!r.sent) continue;
    ++sent;
    if (MeetsSlo(r, slo)) ++good;
  }
  nlohmann::json bounds = nlohmann::json::object();
  if (slo.ttft_ms) bounds["ttft"] = *slo.ttft_ms;
  if (slo.tpot_ms) bounds["tpot"] = *slo.tpot_ms;
  if (slo.e2e_ms) bounds["e2e"] = *slo.e2e_ms;
  return {{"slo_ms", bounds},
          {"requests_per_s", duration_s > 0 ? good / duration_s : 0.0},
          {"fraction", sent > 0 ? static_cast<double>(good) / sent : 0.0},
          {"good_requests", good}};
}

}  // namespace folio::bench

// A parser of the Prometheus text exposition format (0.0.4), enough to read the gauges
// folio-bench samples from the services' /metrics pages: comment lines (# HELP, # TYPE,
// others) are skipped; every sample line gives a name, its labels and a value (NaN,
// +Inf and -Inf included; a trailing timestamp is accepted and ignored).
#ifndef FOLIO_TOOLS_BENCH_PROM_TEXT_H_
#define FOLIO_TOOLS_BENCH_PROM_TEXT_H_

#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace folio::bench {

struct PromSample {
  std::string name;  // histogram series keep their suffix: x_bucket, x_sum, x_count
  std::vector<std::pair<std::string, std::string>> labels;  // in page order, unescaped
  double value = 0;
};

// The samples of `text` in page order, or InvalidArgument naming the first bad line.
absl::StatusOr<std::vector<PromSample>> ParsePromText(absl::string_view text);

// For each of `names` present in `samples`, the sum of its values over all label sets;
// names absent from the page are absent from the result.
std::map<std::string, double> SumByName(const std::vector<PromSample>& samples,
                                        const std::vector<std::string>& names);

}  // namespace folio::bench

#endif  // FOLIO_TOOLS_BENCH_PROM_TEXT_H_

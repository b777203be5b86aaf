// GBNF expressions for the JSON numbers within bounds: what json_schema.h emits for
// integer and number schemas with minimum/maximum. Free functions; thread-safe.
#ifndef FOLIO_COMMON_STRUCTURED_NUMBER_RANGES_H_
#define FOLIO_COMMON_STRUCTURED_NUMBER_RANGES_H_

#include <cstdint>
#include <optional>
#include <string>

namespace folio::structured {

// Digits of an integer part at most (JSON numbers are unbounded; a model must not be able
// to write digits forever), and of a fraction.
inline constexpr int kMaxIntegerDigits = 16;
inline constexpr int kMaxFractionDigits = 16;

// An expression matching exactly the JSON integers (no sign on 0, no leading zeros) in
// [lo, hi]; an unset bound is open, within kMaxIntegerDigits digits. Requires lo <= hi.
std::string IntegerRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi);

// An expression matching JSON numbers (integer part, optional fraction, no exponent) in
// [lo, hi], lo and hi integers: a subset of the numbers there (the values in (-1, 0) are
// left out), every one within them. Requires lo <= hi.
std::string NumberRangeExpr(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace folio::structured

#endif  // FOLIO_COMMON_STRUCTURED_NUMBER_RANGES_H_

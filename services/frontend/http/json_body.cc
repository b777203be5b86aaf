#include "services/frontend/http/json_body.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace folio::frontend::openai {
namespace {

using json = nlohmann::json;

// nlohmann's DOM builder, plus the path of the value being parsed, so that an error can
// say which field it is in. Depth is bounded by the JSON nesting of the body.
class PathTrackingSax {
 public:
  explicit PathTrackingSax(json* root) : dom_(*root, /*allow_exceptions_=*/false) {}

  bool null() { return Value(dom_.null()); }
  bool boolean(bool v) { return Value(dom_.boolean(v)); }
  bool number_integer(json::number_integer_t v) { return Value(dom_.number_integer(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(dom_.number_unsigned(v)); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return Value(dom_.number_float(v, s));
  }
  bool string(json::string_t& v) { return Value(dom_.string(v)); }
  bool binary(json::binary_t& v) { return Value(dom_.binary(v)); }
  bool start_object(std::size_t n) {
    frames_.push_back({false, 0, {}});
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    frames_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return Value(dom_.end_object());
  }
  bool start_array(std::size_t n) {
    frames_.push_back({true, 0, {}});
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return Value(dom_.end_array());
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    error_position_ = position;
    error_token_ = token;
    error_id_ = ex.id;
    error_what_ = ex.what();
    error_path_ = Path();
    return false;
  }

  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (f.array) {
        absl::StrAppend(&path, "[", f.index, "]");
      } else {
        absl::StrAppend(&path, path.empty() ? "" : ".", f.key);
      }
    }
    return path;
  }

  int error_id_ = 0;
  size_t error_position_ = 0;
  std::string error_token_;
  std::string error_what_;
  std::string error_path_;

 private:
  struct Frame {
    bool array;
    size_t index;     // arrays: the element being parsed
    std::string key;  // objects: the member being parsed
  };
  // A value ended: the enclosing array moves to its next element.
  bool Value(bool ok) {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    return ok;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<Frame> frames_;
};

}  // namespace

absl::StatusOr<json> ParseJsonBody(std::string_view text) {
  json root;
  PathTrackingSax sax(&root);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return root;
  if (sax.error_id_ == 406) {  // out_of_range.406: a number that overflows a double
    const std::string field = sax.error_path_.empty() ? "the request body" : sax.error_path_;
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is out of range: the number ", sax.error_token_, " overflows a double"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the request body is not valid JSON: ",
      sax.error_what_.empty() ? std::string("parse error") : sax.error_what_));
}

}  // namespace folio::frontend::openai

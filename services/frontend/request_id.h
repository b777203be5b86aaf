// Request ids for requests whose client gave none: 32 random lowercase hex digits
// (128 bits), so ids from many stateless frontends do not collide.
// Stateless free function; thread-safe.
#ifndef FOLIO_SERVICES_FRONTEND_REQUEST_ID_H_
#define FOLIO_SERVICES_FRONTEND_REQUEST_ID_H_

#include <string>

namespace folio::frontend {

// A fresh random id, e.g. "3f9a0c1e5b7d2f4a8c6e0b1d3f5a7c9e".
std::string NewRequestId();

}  // namespace folio::frontend

#endif  // FOLIO_SERVICES_FRONTEND_REQUEST_ID_H_

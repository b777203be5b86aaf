// Incarnation ids: a process that keeps state others mirror (a worker rank's KV tensors,
// the cache manager's pool) reports one id per start, so a peer can tell a process that
// came back (a new id: its state is gone and must be set up again) from one that only
// stopped answering for a while (the same id: its state is still there).
#ifndef FOLIO_COMMON_INCARNATION_H_
#define FOLIO_COMMON_INCARNATION_H_

#include <string>

namespace folio {

// A fresh id: 32 hex digits, 128 bits from the OS's random source, different on every
// call (with overwhelming probability) and so on every start. Thread-safe.
std::string NewIncarnationId();

}  // namespace folio

#endif  // FOLIO_COMMON_INCARNATION_H_

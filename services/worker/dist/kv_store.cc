#include "services/worker/dist/kv_store.h"

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"

namespace folio::worker {

absl::Status KvStore::Set(const std::string& key, std::string value) {
  if (key.empty() || static_cast<int64_t>(key.size()) > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous key must have 1 to ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  if (static_cast<int64_t>(value.size()) > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous value for \"", key, "\" has ",
                                                   value.size(), " bytes; the limit is ",
                                                   kMaxValueBytes));
  }
  absl::MutexLock lock(&mu_);
  if (!values_.contains(key) && static_cast<int>(values_.size()) >= kMaxKeys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the rendezvous table is full (", kMaxKeys, " keys)"));
  }
  values_[key] = std::move(value);
  return absl::OkStatus();
}

std::optional<std::string> KvStore::Get(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::Status KvStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto all_present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& k : keys) {
      if (!values_.contains(k)) return false;
    }
    return true;
  };
  if (mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!values_.contains(k)) missing.push_back(k);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rendezvous: keys [", absl::StrJoin(missing, ", "), "] not published within ",
                   absl::FormatDuration(timeout), " (has every rank started?)"));
}

namespace {
constexpr absl::string_view kGroupKeyStart = "folio-tp/g";
}  // namespace

std::string GroupKeyPrefix(int64_t generation) { return absl::StrCat(kGroupKeyStart, generation); }

int KvStore::EraseGroupsBefore(int64_t generation) {
  absl::MutexLock lock(&mu_);
  int erased = 0;
  for (auto it = values_.begin(); it != values_.end();) {
    absl::string_view key = it->first;
    int64_t g = 0;
    const bool older = absl::ConsumePrefix(&key, kGroupKeyStart) &&
                       absl::SimpleAtoi(key.substr(0, key.find('/')), &g) && g < generation;
    if (older) {
      values_.erase(it++);
      ++erased;
    } else {
      ++it;
    }
  }
  return erased;
}

void LocalGlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = store_->Set(key, std::string(data.begin(), data.end()));
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

std::vector<char> LocalGlooStore::get(const std::string& key) {
  wait({key});
  std::optional<std::string> v = store_->Get(key);
  if (!v) throw std::runtime_error(absl::StrCat("rendezvous key ", key, " vanished"));
  return std::vector<char>(v->begin(), v->end());
}

void LocalGlooStore::wait(const std::vector<std::string>& keys) {
  absl::Status s = store_->Wait(keys, timeout_);
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

void LocalGlooStore::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  absl::Status s = store_->Wait(keys, absl::FromChrono(timeout));
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

}  // namespace folio::worker

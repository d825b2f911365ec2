#include "colibri/store/fault_injection.h"

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "colibri/core/units.h"

namespace colibri::store {

void FaultInjector::AddRule(const FaultRule& rule) {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.push_back(rule);
  any_rules_ = true;
}

void FaultInjector::SetDiskBandwidth(uint32_t disk, uint64_t bytes_per_sec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bandwidth_.size() <= disk) bandwidth_.resize(disk + 1, 0);
  bandwidth_[disk] = bytes_per_sec;
}

void FaultInjector::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  rules_.clear();
  bandwidth_.clear();
  any_rules_ = false;
}

uint64_t FaultInjector::DiskBandwidth(uint32_t disk) const {
  std::lock_guard<std::mutex> lock(mu_);
  return disk < bandwidth_.size() ? bandwidth_[disk] : 0;
}

absl::Status FaultInjector::AddSpec(std::string_view spec) {
  FaultRule rule;
  bool slow = false, have_kind = false;
  uint64_t rate = 0;
  const std::string text(spec);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("fault spec '", text, "': ", std::string(why)));
  };
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    const std::string& k = kv.first;
    const std::string& v = kv.second;
    if (k == "kind") {
      have_kind = true;
      if (v == "eio")
        rule.kind = FaultKind::kEio;
      else if (v == "short")
        rule.kind = FaultKind::kShortRead;
      else if (v == "eof")
        rule.kind = FaultKind::kEof;
      else if (v == "corrupt")
        rule.kind = FaultKind::kCorrupt;
      else if (v == "slow")
        slow = true;
      else
        return bad(absl::StrCat("unknown kind '", v, "' (eio, short, eof, corrupt, slow)"));
    } else if (k == "disk") {
      if (!absl::SimpleAtoi(v, &rule.disk) || rule.disk < 0) return bad("disk must be an index");
    } else if (k == "count") {
      if (!absl::SimpleAtoi(v, &rule.count)) return bad("count must be an integer");
    } else if (k == "offset") {
      std::pair<std::string, std::string> r = absl::StrSplit(v, absl::MaxSplits('-', 1));
      auto a = ParseSize(r.first);
      auto b = ParseSize(r.second);
      if (!a.ok() || !b.ok() || *b <= *a) return bad("offset must be A-B with A < B");
      rule.offset_begin = *a;
      rule.offset_end = *b;
    } else if (k == "rate") {
      auto r = ParseSize(v);
      if (!r.ok() || *r == 0) return bad("rate must be a size per second, e.g. 100M");
      rate = *r;
    } else {
      return bad(absl::StrCat("unknown key '", k, "'"));
    }
  }
  if (!have_kind) return bad("kind= is required");
  if (slow) {
    if (rule.disk < 0 || rate == 0) return bad("kind=slow needs disk= and rate=");
    SetDiskBandwidth(static_cast<uint32_t>(rule.disk), rate);
    return absl::OkStatus();
  }
  AddRule(rule);
  return absl::OkStatus();
}

void FaultInjector::AfterRead(uint32_t disk, uint64_t offset, uint64_t length,
                              std::span<const iovec> dst, int64_t* result) {
  if (!any_rules_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : rules_) {
    if (r.count == 0) continue;
    if (r.disk >= 0 && static_cast<uint32_t>(r.disk) != disk) continue;
    if (offset + length <= r.offset_begin || offset >= r.offset_end) continue;
    switch (r.kind) {
      case FaultKind::kEio: *result = -EIO; break;
      case FaultKind::kEof:
        if (*result <= 0) continue;
        *result = 0;
        break;
      case FaultKind::kShortRead:
        if (*result < 8192) continue;  // nothing shorter that is still 4 KiB aligned
        *result = static_cast<int64_t>(AlignUp(static_cast<uint64_t>(*result) / 2, 4096));
        if (*result >= static_cast<int64_t>(length)) *result -= 4096;
        break;
      case FaultKind::kCorrupt: {
        if (*result <= 0) continue;
        uint64_t at =
            static_cast<uint64_t>(*result) / 2;  // the byte in the middle of what was read
        for (const iovec& v : dst) {
          if (at < v.iov_len) {
            static_cast<uint8_t*>(v.iov_base)[at] ^= 0x5a;
            break;
          }
          at -= v.iov_len;
        }
        break;
      }
    }
    if (r.count > 0) r.count--;
    fired_[static_cast<int>(r.kind)]++;
    return;  // one fault per read
  }
}

}  // namespace colibri::store

#include "jinja_budget.h"

#include "absl/strings/str_cat.h"
#include "colibri/core/status.h"
#include "jinja_value.h"

namespace colibri::tokenizer::jinja_internal {
namespace {

thread_local Budget* current_budget = nullptr;

constexpr size_t kBytesPerStep = 16;

}  // namespace

Budget::~Budget() {
  // Moving the items out first: destroying one may drop the last reference to a
  // list holding another namespace, which is still held here, so no destructor
  // recurses across namespaces.
  for (const auto& ns : namespaces_) {
    std::vector<std::pair<Value, Value>> items = std::move(ns->items);
    ns->items.clear();
  }
}

bool Budget::Charge(int64_t steps) {
  if (!status_.ok()) return false;
  used_ += steps;
  if (used_ <= limits_.max_steps) return true;
  status_ =
      absl::ResourceExhaustedError(absl::StrCat("step budget of ", limits_.max_steps, " exceeded"));
  return false;
}

void Budget::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

BudgetScope::BudgetScope(Budget* budget) : previous_(current_budget) { current_budget = budget; }
BudgetScope::~BudgetScope() { current_budget = previous_; }

Budget* CurrentBudget() { return current_budget; }

const jinja::Limits& CurrentLimits() {
  static const jinja::Limits kDefaults;
  return current_budget != nullptr ? current_budget->limits() : kDefaults;
}

bool Charge(int64_t steps) { return current_budget == nullptr || current_budget->Charge(steps); }

bool ChargeBytes(size_t bytes) { return Charge(1 + static_cast<int64_t>(bytes / kBytesPerStep)); }

absl::Status CheckStringCap(size_t bytes, std::string_view what) {
  const size_t limit = CurrentLimits().max_string_bytes;
  if (bytes <= limit) return absl::OkStatus();
  absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
      std::string(what), " would build a string of ", bytes, " bytes, over the limit of ", limit));
  if (current_budget != nullptr) current_budget->Fail(s);
  return s;
}

absl::Status CheckStringSize(size_t bytes, std::string_view what) {
  RETURN_IF_ERROR(CheckStringCap(bytes, what));
  if (!ChargeBytes(bytes)) return current_budget->status();
  return absl::OkStatus();
}

absl::Status CheckListSize(size_t items, std::string_view what) {
  const size_t limit = CurrentLimits().max_list_items;
  if (items > limit) {
    absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
        std::string(what), " would build a list of ", items, " items, over the limit of ", limit));
    if (current_budget != nullptr) current_budget->Fail(s);
    return s;
  }
  if (!Charge(1 + static_cast<int64_t>(items))) return current_budget->status();
  return absl::OkStatus();
}

bool CheckValueDepth(int depth) {
  const int limit = CurrentLimits().max_value_depth;
  if (depth <= limit) return true;
  if (current_budget != nullptr) {
    current_budget->Fail(absl::ResourceExhaustedError(
        absl::StrCat("values nested deeper than the limit of ", limit, " levels")));
  }
  return false;
}

}  // namespace colibri::tokenizer::jinja_internal

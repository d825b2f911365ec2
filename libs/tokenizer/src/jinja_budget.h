// The state one Render keeps beside its variables (internal): the step budget
// and size caps of jinja::Limits, and the namespaces the template created. A
// BudgetScope installs it for the rendering thread, so values and built-ins
// deep in a call chain charge it without threading it through every signature
// (a render runs on one thread from start to end). Outside a render (no scope)
// charges are free and the default Limits' size caps apply.
//
// Errors are latched: the first limit hit is kept and every later charge fails,
// so a built-in that cannot return a Status (repr, ==) stops early and the
// evaluator reports the latched error at its next step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "colibri/tokenizer/jinja.h"

namespace colibri::tokenizer::jinja_internal {

struct Dict;

class Budget {
 public:
  explicit Budget(const jinja::Limits& limits) : limits_(limits) {}
  // Empties every namespace the render created, which breaks reference cycles
  // through them
  // (`{% set ns.self = ns %}`) and keeps destruction shallow.
  ~Budget();
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  const jinja::Limits& limits() const { return limits_; }
  int64_t steps_used() const { return used_; }
  // Spends `steps`; false once the budget is spent or an error is latched.
  bool Charge(int64_t steps);
  // Latches `status` unless an error is already latched.
  void Fail(absl::Status status);
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  // Keeps a namespace alive until the render ends (see the destructor).
  void AdoptNamespace(std::shared_ptr<Dict> ns) { namespaces_.push_back(std::move(ns)); }

 private:
  jinja::Limits limits_;
  int64_t used_ = 0;
  absl::Status status_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

class BudgetScope {
 public:
  explicit BudgetScope(Budget* budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* previous_;
};

// The calling thread's budget; null outside a render.
Budget* CurrentBudget();
const jinja::Limits& CurrentLimits();

// Spends steps on the current budget: false (error latched) once it is spent.
bool Charge(int64_t steps);
// One step, plus one per 16 bytes built or scanned.
bool ChargeBytes(size_t bytes);
// ResourceExhausted (latched) when `what` would build a string of `bytes`, over
// max_string_bytes. CheckStringSize also charges the bytes; CheckStringCap only
// checks (for text growing piece by piece, whose pieces are charged as they are
// made).
absl::Status CheckStringSize(size_t bytes, std::string_view what);
absl::Status CheckStringCap(size_t bytes, std::string_view what);
// The same for a list or dict of `items` (max_list_items; one step per item).
absl::Status CheckListSize(size_t items, std::string_view what);
// False (error latched) when a value `depth` levels deep exceeds
// max_value_depth.
bool CheckValueDepth(int depth);

}  // namespace colibri::tokenizer::jinja_internal

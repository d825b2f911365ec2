#include "stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace colibri::router {
namespace {

TEST(StopStringMatcherTest, Table) {
  struct Case {
    std::vector<std::string> stops;
    std::vector<std::string> pieces;  // the decoded text as it arrives
    std::vector<std::string> want;    // what each Push lets out
    std::string stop;                 // "" = never stopped; then Flush() gives `rest`
    std::string rest;
  };
  const Case cases[] = {
      // No stop strings: everything passes at once.
      {{}, {"ab", "cd"}, {"ab", "cd"}, "", ""},
      {{""}, {"ab"}, {"ab"}, "", ""},
      // A partial match is held, then released when it fails.
      {{"old mill"}, {"the old", " man"}, {"the ", "old man"}, "", ""},
      // ... or completed: the text stops before it.
      {{"old mill"}, {"the old", " mi", "ll and"}, {"the ", "", ""}, "old mill", ""},
      {{"mill"}, {"the old", " mi", "ll and"}, {"the old", " ", ""}, "mill", ""},
      // Across many pieces, one byte at a time.
      {{"END"}, {"x", "E", "N", "D", "y"}, {"x", "", "", ""}, "END", ""},
      // The earliest match wins whatever the order in the list, also when both complete in one
      // piece and overlap.
      {{"cd", "bc"}, {"abcd"}, {"a"}, "bc", ""},
      {{"river", "and"}, {"the old man and the river"}, {"the old man "}, "and", ""},
      // A tie at the same position: the first in the list.
      {{"ab", "abc"}, {"xabc"}, {"x"}, "ab", ""},
      // The longest possible start is held back (two candidates).
      {{"abcd", "cde"}, {"zabc"}, {"z"}, "", "abc"},
      {{"abcd", "cde"}, {"zabc", "x"}, {"z", "abcx"}, "", ""},
      // At the very start: nothing before it.
      {{"the"}, {"the end"}, {""}, "the", ""},
      // Never completed: the held tail comes out at Flush.
      {{"riverbank"}, {"by the river"}, {"by the "}, "", "river"},
  };
  for (const Case& c : cases) {
    std::string trace;
    for (const auto& p : c.pieces) trace += "[" + p + "]";
    SCOPED_TRACE(trace);
    StopStringMatcher m(c.stops);
    std::vector<std::string> got;
    std::string stop;
    for (const auto& p : c.pieces) {
      StopStringMatcher::Step step = m.Push(p);
      got.push_back(step.text);
      if (step.stopped) {
        stop = step.stop;
        break;
      }
    }
    EXPECT_EQ(got, c.want);
    EXPECT_EQ(stop, c.stop);
    if (stop.empty()) {
      EXPECT_EQ(m.Flush(), c.rest);
    }
  }
}

}  // namespace
}  // namespace colibri::router

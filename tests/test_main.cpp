// doctest's main, in its own file so the suites compile independently.
// ctest runs one case per process (doctest_discover_tests); when the cases
// run all skipped (support/skip.hpp) and none failed, the exit status is 77,
// which tests/CMakeLists.txt tells ctest means "skipped".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support/skip.hpp"

namespace {

int cases_run = 0;
int cases_skipped = 0;

// Counts the cases that ended skipped with no assertion made and none failed.
struct SkipCounter : doctest::IReporter {
  explicit SkipCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { flashscope::testing::case_skipped() = false; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    ++cases_run;
    if (flashscope::testing::case_skipped() && stats.testCaseSuccess && stats.numAssertsCurrentTest == 0) {
      ++cases_skipped;
    }
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

REGISTER_LISTENER("skip_counter", 1, SkipCounter);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit() || status != 0) return status;
  return cases_run > 0 && cases_skipped == cases_run ? 77 : 0;
}

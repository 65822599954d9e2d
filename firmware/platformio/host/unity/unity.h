// Minimal stand-in for ThrowTheSwitch Unity, enough for test/test_core on the host with g++/ctest
// (PlatformIO's `native` env runs the same test file with the real Unity).
#pragma once

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace unity_shim {
struct State {
  int tests = 0;
  int failures = 0;
  const char* current = "";
  jmp_buf env;
};
inline State& state() {
  static State s;
  return s;
}
[[noreturn]] inline void fail(const char* file, int line, const char* msg) {
  std::printf("%s:%d:%s:FAIL: %s\n", file, line, state().current, msg);
  std::longjmp(state().env, 1);
}
inline void run(void (*fn)(), const char* name, void (*set_up)(), void (*tear_down)()) {
  State& s = state();
  s.current = name;
  ++s.tests;
  if (setjmp(s.env) == 0) {
    set_up();
    fn();
    tear_down();
    std::printf("%s:PASS\n", name);
  } else {
    ++s.failures;
  }
}
inline void check_int(long long expected, long long actual, const char* file, int line, const char* msg) {
  if (expected != actual) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "expected %lld was %lld %s", expected, actual, msg ? msg : "");
    fail(file, line, buf);
  }
}
inline void check_mem(const void* expected, const void* actual, size_t n, const char* file, int line) {
  const uint8_t* e = static_cast<const uint8_t*>(expected);
  const uint8_t* a = static_cast<const uint8_t*>(actual);
  for (size_t i = 0; i < n; ++i) {
    if (e[i] != a[i]) {
      char buf[128];
      std::snprintf(buf, sizeof(buf), "byte %zu: expected 0x%02X was 0x%02X", i, e[i], a[i]);
      fail(file, line, buf);
    }
  }
}
inline void check_str(const char* expected, const char* actual, const char* file, int line) {
  if (expected == nullptr || actual == nullptr || std::strcmp(expected, actual) != 0) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "expected \"%s\" was \"%s\"", expected ? expected : "(null)",
                  actual ? actual : "(null)");
    fail(file, line, buf);
  }
}
}  // namespace unity_shim

void setUp(void);
void tearDown(void);

#define UNITY_BEGIN() (unity_shim::state().tests = 0, unity_shim::state().failures = 0)
#define UNITY_END()                                                                                  \
  (std::printf("\n%d Tests %d Failures 0 Ignored\n%s\n", unity_shim::state().tests,                  \
               unity_shim::state().failures, unity_shim::state().failures ? "FAIL" : "OK"),           \
   unity_shim::state().failures)
#define RUN_TEST(fn) unity_shim::run(fn, #fn, setUp, tearDown)
#define TEST_FAIL_MESSAGE(msg) unity_shim::fail(__FILE__, __LINE__, msg)
#define TEST_ASSERT_TRUE_MESSAGE(c, msg) \
  do {                                   \
    if (!(c)) unity_shim::fail(__FILE__, __LINE__, msg); \
  } while (0)
#define TEST_ASSERT_TRUE(c) TEST_ASSERT_TRUE_MESSAGE(c, "expected true: " #c)
#define TEST_ASSERT_FALSE(c) TEST_ASSERT_TRUE_MESSAGE(!(c), "expected false: " #c)
#define TEST_ASSERT_EQUAL_INT_MESSAGE(e, a, msg) \
  unity_shim::check_int((long long)(e), (long long)(a), __FILE__, __LINE__, msg)
#define TEST_ASSERT_EQUAL_INT(e, a) TEST_ASSERT_EQUAL_INT_MESSAGE(e, a, nullptr)
#define TEST_ASSERT_EQUAL_UINT32(e, a) TEST_ASSERT_EQUAL_INT_MESSAGE(e, a, nullptr)
#define TEST_ASSERT_EQUAL_UINT32_MESSAGE(e, a, msg) TEST_ASSERT_EQUAL_INT_MESSAGE(e, a, msg)
#define TEST_ASSERT_EQUAL_HEX16(e, a) TEST_ASSERT_EQUAL_INT_MESSAGE(e, a, nullptr)
#define TEST_ASSERT_EQUAL_HEX8_ARRAY(e, a, n) unity_shim::check_mem(e, a, n, __FILE__, __LINE__)
#define TEST_ASSERT_EQUAL_MEMORY(e, a, n) unity_shim::check_mem(e, a, n, __FILE__, __LINE__)
#define TEST_ASSERT_EQUAL_STRING(e, a) unity_shim::check_str(e, a, __FILE__, __LINE__)
#define TEST_ASSERT_NOT_NULL(p) TEST_ASSERT_TRUE_MESSAGE((p) != nullptr, "expected non-null: " #p)
#define TEST_ASSERT_NULL(p) TEST_ASSERT_TRUE_MESSAGE((p) == nullptr, "expected null: " #p)

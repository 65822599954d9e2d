// Assertions shared by the core's host test executables (test_core, test_protocol, test_time_sync).
#pragma once

#include <unity.h>

#include "tb_error.h"

// Evaluates `actual` exactly once; on failure the message names the error.
#define ASSERT_ERR(expected, actual)                                                                   \
  do {                                                                                                 \
    const tb::Err got_ = (actual);                                                                     \
    TEST_ASSERT_EQUAL_INT_MESSAGE(static_cast<int>(expected), static_cast<int>(got_), tb::err_name(got_)); \
  } while (0)
#define ASSERT_OK(actual) ASSERT_ERR(tb::Err::Ok, actual)

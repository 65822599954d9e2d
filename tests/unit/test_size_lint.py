"""The size rule (scripts/size_lint.py, run by `make check`): the repository keeps it, and the scanner sees what
it must see: Python functions by ``ast``, C++ function bodies by its brace scanner, an allow-list that
cannot go stale."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import size_lint
from scripts.size_lint import CPP_ROOTS, MAX_FILE_LINES, MAX_FUNCTION_LINES, PYTHON_ROOTS, check, cpp_functions

PY, BENCH = PYTHON_ROOTS  # made-up files below go under the real roots of a temporary tree
CORE, HOST = CPP_ROOTS

CPP = r'''#include "x.h"
#if defined(ESP32)
#define BODY { return 1; }
#endif

namespace tb {
namespace {

const int kTable[] = {1, 2, 3};  // { not a function }
struct Pair { int a; int b; };

int helper(int x) {
  const char* s = "}{";  /* } */
  char c = '}';
  auto f = [&](int y) { return y + x; };
  if (x) {
    return f(x);
  }
  return 0;
}

}  // namespace

class Box {
 public:
  Box(int a) : a_{a}, b_(a) {
    helper(a);
  }
  int get() const noexcept { return a_; }
  auto twice() -> int {
    return 2 * a_;
  }

 private:
  int a_;
  int b_;
};

template <typename T>
T Box2<T>::value() const {
  return T{};
}

}  // namespace tb
'''


def test_the_repository_keeps_the_size_rule() -> None:
    problems = check()
    assert problems == [], "\n".join(problems)


def test_the_command_line_says_so_by_its_exit_code() -> None:
    proc = subprocess.run([sys.executable, str(Path(size_lint.__file__))], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_cpp_function_bodies_are_found_with_their_lines() -> None:
    assert cpp_functions(CPP) == [
        ("helper", 12, 9),  # the lambda and the if block count inside it; braces in literals and comments do not
        ("Box", 26, 3),  # a constructor whose initialiser list has a braced member
        ("get", 29, 1),
        ("twice", 30, 3),  # a trailing return type
        ("Box2<T>::value", 39, 4),  # from its template line
    ]


def test_unbalanced_cpp_braces_are_refused_not_guessed() -> None:
    with pytest.raises(ValueError):
        cpp_functions("int f() {\n#if A\n  if (a) {\n#else\n  if (b) {\n#endif\n  }\n}\n")


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_long_files_and_functions_are_reported_in_python_and_cpp(tmp_path: Path) -> None:
    long_body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))  # + the def line: one too many
    cpp_body = "".join(f"  int x{i} = {i};\n" for i in range(MAX_FUNCTION_LINES - 1))
    repo = _tree(tmp_path, {
        f"{PY}/a.py": "def long_one():\n" + long_body + "\n\nclass C:\n    def ok(self):\n        pass\n",
        f"{BENCH}/b.py": "x = 1\n" * (MAX_FILE_LINES + 1),
        f"{BENCH}/fine.py": "x = 1\n" * MAX_FILE_LINES,
        f"{HOST}/sub/c.cpp": "int f() {\n" + cpp_body + "}\n",  # 61 lines, in a sub-folder
        f"{CORE}/d.h": "inline int g() {\n" + cpp_body[: -len("  int x58 = 58;\n")]
                                                        + "}\n",  # 60 lines: allowed
    })
    problems = check(repo, allowed={})
    assert sorted(p.split(": ", 1)[1] for p in problems) == sorted([
        f"{PY}/a.py:long_one: {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
        f"{BENCH}/b.py: {MAX_FILE_LINES + 1} lines (limit {MAX_FILE_LINES})",
        f"{HOST}/sub/c.cpp:f: {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})",
    ])


def test_the_allow_list_needs_a_breach_to_allow(tmp_path: Path) -> None:
    repo = _tree(tmp_path, {f"{BENCH}/b.py": "x = 1\n" * (MAX_FILE_LINES + 1), f"{PY}/ok.py": "x = 1\n"})
    assert check(repo, allowed={f"{BENCH}/b.py": "one table, clearer whole"}) == []
    stale = check(repo, allowed={f"{BENCH}/b.py": "why", f"{PY}/ok.py": "why"})
    assert stale == [f"stale ALLOWED entry (nothing over the limit there; remove it): {PY}/ok.py"]
    assert all(reason.strip() for reason in size_lint.ALLOWED.values()), "every exception says why"

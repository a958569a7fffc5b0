#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The functions longer than a limit in C++ and Python sources (ctest lint.function_length).

usage: function_lengths.py [--max N] [--list] PATH...
A function's length is the lines from its first line (its signature) to its last (the
closing brace in C++, the last line of its body in Python), comments and blank lines
included. PATHs are files or folders (searched for .cpp, .hpp, .cu, .cuh, .h and .py).
Prints "path:line: name is N lines (limit M)" for each longer one and exits 1 when there is
one; --list prints every function with its length instead.
"""

import ast
import os
import re
import sys

CPP_EXTENSIONS = (".cpp", ".hpp", ".cu", ".cuh", ".h")
NOT_A_FUNCTION = re.compile(r"^\s*(?:\}\s*)?(?:if|for|while|switch|catch|else|do|try|return)\b")
TYPE_HEAD = re.compile(r"\b(?:class|struct|union|enum|namespace)\b[^()]*$|^\s*(?:extern\s+\"C\"\s*)?$")


def strip_cpp(text):
    """text with comments, string and character literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            k = text.find("(", i)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator (1'000)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cpp_functions(path):
    """(name, first line, length) of every function defined at namespace or class scope."""
    text = strip_cpp(open(path, encoding="utf-8").read())
    found, depth, start_line, start_depth, name = [], 0, None, None, None
    line_no, stmt, stmt_line = 1, "", 1
    for c in text:
        if c == "\n":
            line_no += 1
            continue
        if start_line is None:
            if c == "{":
                s = stmt.strip()
                if s.startswith("#"):
                    s = s.split("\n")[-1]
                if ")" in s and not NOT_A_FUNCTION.search(s) and not TYPE_HEAD.search(s) and "=" not in s.split("(")[0]:
                    m = re.search(r"([~\w:<>]+|operator\s*\S+)\s*\(", s)
                    start_line, start_depth, name = stmt_line, depth, m.group(1) if m else "?"
                depth += 1
                stmt = ""
            elif c == "}":
                depth -= 1
                stmt = ""
            elif c == ";":
                stmt = ""
            else:
                if not stmt.strip():
                    stmt_line = line_no
                stmt += c
        else:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == start_depth:
                    found.append((name, start_line, line_no - start_line + 1))
                    start_line, stmt = None, ""
    return found


def py_functions(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = []

    def visit(node, nested):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                if not nested:
                    found.append((child.name, first, child.end_lineno - first + 1))
                visit(child, True)
            else:
                visit(child, nested)

    visit(tree, False)
    return found


def sources(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "build") and not d.startswith("."))
            for f in sorted(files):
                if f.endswith(CPP_EXTENSIONS + (".py",)):
                    yield os.path.join(root, f)


def main(argv):
    limit, listing, paths = 80, False, []
    args = iter(argv)
    for a in args:
        if a == "--max":
            limit = int(next(args))
        elif a == "--list":
            listing = True
        else:
            paths.append(a)
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    long_ones = 0
    for path in sources(paths):
        funcs = py_functions(path) if path.endswith(".py") else cpp_functions(path)
        for name, line, length in funcs:
            if listing:
                print(f"{path}:{line}: {name} {length}")
            elif length > limit:
                print(f"{path}:{line}: {name} is {length} lines (limit {limit})")
                long_ones += 1
    if not listing and long_ones == 0:
        print(f"function_lengths: no function over {limit} lines")
    return 1 if long_ones else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

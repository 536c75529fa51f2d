#!/usr/bin/env python3
"""Checks libhoma.so's exported symbols against the public headers.

    check_exports.py --lib build/src/libhoma.so --include include [--cc cc] [--nm nm]

Every defined dynamic symbol of the library (nm -D --defined-only) must be
declared in include/homa/*.h, and every function or variable declared there
must be exported.  The headers are run through the C preprocessor (as an
application sees them) and their top-level declarations are collected;
static inline functions are not part of the ABI and are skipped.
Exit status: 0 when both lists agree, 1 when they do not, 2 on a usage or
tool error."""

import argparse
import pathlib
import re
import subprocess
import sys

# Defined by the linker in every shared object, not by libhoma's code.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def preprocess(cc, include_dir):
    headers = sorted(pathlib.Path(include_dir, "homa").glob("*.h"))
    if not headers:
        raise RuntimeError(f"no headers in {include_dir}/homa")
    src = "".join(f"#include <homa/{h.name}>\n" for h in headers)
    out = subprocess.run([cc, "-std=c11", "-E", "-I", str(include_dir), "-x", "c", "-"],
                         input=src, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{cc} -E failed:\n{out.stderr}")
    # Keep only the text that comes from the public headers (line markers
    # '# N "file"' say where each line comes from).
    root = str(pathlib.Path(include_dir, "homa").resolve())
    keep, text = False, []
    for line in out.stdout.splitlines():
        m = re.match(r'#\s*\d+\s+"([^"]*)"', line)
        if m:
            name = m.group(1)
            keep = name.startswith("<") is False and str(pathlib.Path(name).resolve()).startswith(root)
            continue
        if keep:
            text.append(line)
    return headers, "\n".join(text)


def strip_attributes(text):
    # __attribute__((...)) with balanced parentheses.
    out, i = [], 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.index("(", j)
        depth = 0
        while True:
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


def declarations(text):
    """Top-level (functions, variables) declared with external linkage."""
    text = strip_attributes(re.sub(r'"(\\.|[^"\\])*"', '""', text))
    funcs, data = set(), set()
    depth, stmt = 0, []
    for c in text:
        if c == "{":
            if depth == 0:
                head = "".join(stmt).strip()
                # A function body at file scope: only static inline is allowed.
                if head.endswith(")") and not re.match(r"(static|typedef)\b", head):
                    raise RuntimeError(f"non-static function defined in a header: {head}")
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                head = "".join(stmt).strip()
                if head.endswith(")"):  # end of a static inline function
                    stmt = []
                    continue
        if depth == 0 and c == ";":
            s = " ".join("".join(stmt).split())
            stmt = []
            if not s or re.match(r"(typedef|static)\b", s):
                continue
            s = re.sub(r"\{.*\}", " ", s)  # struct/enum bodies
            if "(" in s:
                # Name before the parameter list; a pointer-returning
                # declaration still has it right before the first '('.
                m = re.search(r"([A-Za-z_]\w*)\s*\(", s)
                if m:
                    funcs.add(m.group(1))
            elif re.match(r"extern\b", s):
                m = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$", s)
                if m:
                    data.add(m.group(1))
            continue
        if depth == 0 or c in "{}":
            stmt.append(c)
        elif depth > 0:
            stmt.append(c)
    return funcs, data


def exports(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{nm} -D --defined-only {lib} failed:\n{out.stderr}")
    syms = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, name = parts[-2], parts[-1].split("@")[0]
        if name in LINKER_SYMBOLS:
            continue
        syms[name] = kind
    return syms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    try:
        headers, text = preprocess(args.cc, args.include)
        funcs, data = declarations(text)
        syms = exports(args.nm, args.lib)
    except (RuntimeError, OSError) as e:
        print(f"check_exports: {e}", file=sys.stderr)
        return 2
    declared = funcs | data
    extra = sorted(set(syms) - declared)
    missing = sorted(declared - set(syms))
    wrong_kind = sorted(n for n in funcs if n in syms and syms[n] not in ("T", "W", "i"))
    print(f"{args.lib}: {len(syms)} defined dynamic symbols; "
          f"{len(headers)} public headers declare {len(funcs)} functions, {len(data)} variables")
    if args.verbose:
        for n in sorted(syms):
            print(f"  {syms[n]} {n}")
    ok = True
    if extra:
        ok = False
        print(f"FAIL: {len(extra)} exported but declared in no public header "
              "(mark internal code static or keep it out of HOMA_API):")
        for n in extra:
            print(f"  {syms[n]} {n}")
    if missing:
        ok = False
        print(f"FAIL: {len(missing)} declared in include/homa/ but not exported "
              "(missing HOMA_API or definition?):")
        for n in missing:
            print(f"  {n}")
    if wrong_kind:
        ok = False
        print(f"FAIL: declared as functions but not exported as code: {', '.join(wrong_kind)}")
    if ok:
        print("OK: the exported symbols are exactly the public API")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

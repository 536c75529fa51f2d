#!/usr/bin/env python3
"""Checks of the man pages (docs/man/*.scd, rendered into the build tree).

  check_man.py CHECK --source SRC --pages DIR [--tool NAME=PATH ...]

CHECK is one of:
  render       every rendered page formats with `man -l` without a warning
  functions    every function declared in include/homa/*.h is named in
               libhoma(3)
  environment  every HOMA_* variable read with getenv() in src/ or include/
               is named in libhoma(3); those of a tool in the tool's page
  options      every --option printed by a tool's --help (and by its
               subcommands' --help) is named in the tool's page

Exit status: 0 ok, 1 a check failed (the misses are listed), 77 skipped
(a needed program is missing), 2 bad usage.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys

SKIP = 77

# Page sources and where each tool's getenv() calls live.
TOOL_PAGES = {
    "homa-perf": "homa-perf.1",
    "homa-sim": "homa-sim.1",
    "homa-coll-bench": "homa-coll-bench.1",
    "homa-cluster": "homa-cluster.8",
    "homa-plot": "homa-plot.1",
    "homad": "homad.8",
}
TOOL_SOURCES = {
    "homa-perf": ["tools/homa-perf/*.c", "tools/homa-perf/*/*.c"],
    "homa-sim": ["sim/homa_sim*.c", "sim/fabric.c"],
    "homa-coll-bench": ["tools/homa-coll-bench/*.c"],
    "homa-cluster": ["scripts/homa-cluster"],
    "homa-plot": ["tools/plot/homa-plot"],
    "homad": ["daemon/*.c"],
}
# Each tool's help screens: argument lists that print one.
TOOL_HELPS = {
    "homa-perf": [["--help"], ["cluster", "--help"], ["soak", "--help"]],
    "homa-sim": [["--help"]],
    "homa-coll-bench": [["--help"]],
    "homa-cluster": [["--help"]],
    "homa-plot": [["--help"]],
    "homad": [["--help"]],
}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def page_source(src, page):
    return read(os.path.join(src, "docs", "man", page + ".scd"))


def strip_c(text):
    """C text without comments, string literals and preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    out = []
    cont = False
    for line in text.split("\n"):
        directive = cont or line.lstrip().startswith("#")
        cont = directive and line.rstrip().endswith("\\")
        out.append("" if directive else line)
    return "\n".join(out)


def declared_functions(text):
    """Names of the homa_* functions a header declares or defines.

    A name followed by '(' is a function when what precedes it is a type
    (an identifier or '*'), not an operator, 'return' or a macro call: this
    covers prototypes split over several lines and static inline
    definitions, and skips calls inside inline bodies."""
    code = strip_c(text)
    names = set()
    for m in re.finditer(r"\b(homa_[A-Za-z0-9_]*)\s*\(", code):
        before = code[: m.start()].rstrip()
        prev = re.search(r"([A-Za-z0-9_]+|\*|[^\sA-Za-z0-9_])$", before)
        if prev is None:
            continue
        tok = prev.group(1)
        if tok == "*" or (re.match(r"[A-Za-z_]", tok) and tok not in ("return", "sizeof")):
            names.add(m.group(1))
    return names


def named_in(name, page_text):
    # A whole word, so homa_send does not count as named by homa_send_owned.
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])",
                     page_text) is not None


def check_render(args):
    man = shutil.which("man")
    if man is None:
        print("SKIP: man(1) not installed (apt-get install man-db)")
        return SKIP
    pages = sorted(p for p in glob.glob(os.path.join(args.pages, "*.[1-9]")))
    sources = sorted(glob.glob(os.path.join(args.source, "docs", "man", "*.scd")))
    fails = []
    if len(pages) != len(sources) or not pages:
        fails.append("%d sources in docs/man but %d rendered pages in %s"
                     % (len(sources), len(pages), args.pages))
    # man-db's seccomp sandbox fails in some containers: not what is tested.
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8",
               MAN_DISABLE_SECCOMP="1")
    env.pop("MANPAGER", None)
    env.pop("PAGER", None)
    for p in pages:
        r = subprocess.run([man, "--warnings", "-l", p], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        err = r.stderr.decode(errors="replace").strip()
        out = r.stdout.decode(errors="replace")
        name = os.path.basename(p)
        if r.returncode != 0 or err:
            fails.append("%s: man -l exit %d: %s" % (name, r.returncode, err))
        elif len(out.splitlines()) < 20:
            fails.append("%s: renders to only %d lines" % (name, len(out.splitlines())))
        else:
            print("%s: %d lines, no warnings" % (name, len(out.splitlines())))
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


def check_functions(args):
    headers = sorted(glob.glob(os.path.join(args.source, "include", "homa", "*.h")))
    page = page_source(args.source, "libhoma.3")
    names = {}
    for h in headers:
        for n in declared_functions(read(h)):
            names[n] = os.path.relpath(h, args.source)
    # The version API (include/homa/version.h) is documented before that
    # header exists in every tree; when it does, the parse above finds it.
    missing = sorted(n for n in names if not named_in(n, page))
    print("%d functions declared in %d headers" % (len(names), len(headers)))
    for n in missing:
        print("FAIL: %s (%s) is not named in libhoma(3)" % (n, names[n]))
    if len(names) < 10:
        print("FAIL: found only %d functions: the header parse is broken" % len(names))
        return 1
    return 1 if missing else 0


def getenv_names(paths):
    found = {}
    for path in paths:
        text = read(path)
        pats = [r'getenv\s*\(\s*"(HOMA_[A-Z0-9_]+)"']
        if not path.endswith((".c", ".h")):
            # A shell script: ${HOMA_X...} or $HOMA_X.
            pats = [r"\$\{?(HOMA_[A-Z0-9_]+)"]
        for pat in pats:
            for m in re.finditer(pat, text):
                found.setdefault(m.group(1), path)
    return found


def check_environment(args):
    fails = []
    lib = []
    for d in ("src", "include"):
        for root, _, files in os.walk(os.path.join(args.source, d)):
            lib += [os.path.join(root, f) for f in files if f.endswith((".c", ".h"))]
    checks = [("libhoma.3", getenv_names(lib))]
    for tool, globs in TOOL_SOURCES.items():
        files = []
        for g in globs:
            files += glob.glob(os.path.join(args.source, g))
        checks.append((TOOL_PAGES[tool], getenv_names(files)))
    for page, names in checks:
        text = page_source(args.source, page)
        for n, where in sorted(names.items()):
            if named_in(n, text):
                print("%s: %s documented" % (page, n))
            else:
                fails.append("%s (read in %s) is not named in %s"
                             % (n, os.path.relpath(where, args.source), page))
    if not checks[0][1]:
        fails.append("no getenv(\"HOMA_...\") found in src/: the scan is broken")
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


def check_options(args):
    tools = dict(t.split("=", 1) for t in args.tool)
    if not tools:
        print("SKIP: no tool given (--tool NAME=PATH)")
        return SKIP
    fails = []
    for tool, exe in sorted(tools.items()):
        if tool not in TOOL_PAGES:
            fails.append("unknown tool %s" % tool)
            continue
        text = page_source(args.source, TOOL_PAGES[tool])
        opts = set()
        for argv in TOOL_HELPS[tool]:
            cmd = [exe] + argv
            if exe.endswith("homa-cluster"):
                cmd = ["bash"] + cmd
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=30)
            out = r.stdout.decode(errors="replace")
            if r.returncode != 0:
                fails.append("%s %s: exit %d" % (tool, " ".join(argv), r.returncode))
                continue
            opts |= set(re.findall(r"(?<![A-Za-z0-9-])(--[a-z][a-z0-9-]*)", out))
        missing = sorted(o for o in opts
                         if re.search(r"(?<![A-Za-z0-9-])" + re.escape(o) + r"(?![a-z0-9-])",
                                      text) is None)
        print("%s: %d options in --help, %d missing from %s"
              % (tool, len(opts), len(missing), TOOL_PAGES[tool]))
        for o in missing:
            fails.append("%s: %s is not named in %s" % (tool, o, TOOL_PAGES[tool]))
    for f in fails:
        print("FAIL: " + f)
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("check", choices=["render", "functions", "environment", "options"])
    ap.add_argument("--source", required=True, help="source tree")
    ap.add_argument("--pages", required=True, help="directory of the rendered pages")
    ap.add_argument("--tool", action="append", default=[], help="NAME=PATH of a tool")
    args = ap.parse_args()
    fn = {"render": check_render, "functions": check_functions,
          "environment": check_environment, "options": check_options}[args.check]
    return fn(args)


if __name__ == "__main__":
    sys.exit(main())

"""Builds homa._homa from the libhoma sources of the enclosing checkout.

pyproject.toml holds the metadata; this file only describes the extension,
because its sources live outside python/: the C files of ../src (every
layer libhoma is made of) and this package's src/*.c (homamodule.c and the
hpy_*.c files beside it).  CMake builds the same extension for the tests
(python/CMakeLists.txt); this path exists so that
`pip install --no-build-isolation ./python` works without CMake.
"""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)  # the relative paths below
ROOT = os.path.dirname(HERE)

if not os.path.isfile(os.path.join(ROOT, "include", "homa", "homa.h")):
    raise SystemExit("homa: build from a libhoma checkout (python/ next to src/ and include/)")

# Every layer of libhoma, as src/CMakeLists.txt globs them.  setuptools
# wants paths relative to this directory.
LIB_SOURCES = sorted(
    os.path.relpath(p, HERE) for layer in ("core", "util", "io", "rt", "coll")
    for p in glob.glob(os.path.join(ROOT, "src", layer, "*.c")))

# The extension's own C files.
EXT_SOURCES = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "src", "*.c")))

ext = Extension(
    "homa._homa",
    sources=EXT_SOURCES + LIB_SOURCES,
    include_dirs=["../include", "../src"],
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden"],
    libraries=["m"],
    extra_link_args=["-pthread"],
)

setup(ext_modules=[ext])

"""Runs one group of the Python package's tests under pytest (for ctest).

    python3 run_pytest.py socket|coll|torch [pytest args...]

Exits 77, which ctest reports as skipped, with the reason on stdout when a
module the group needs (pytest, numpy, torch) is missing.  The `homa`
package itself must import: a broken build is a failure, not a skip.
"""
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GROUPS = {
    "socket": ("test_socket.py", ["pytest"]),
    "coll": ("test_coll.py", ["pytest", "numpy"]),
    "torch": ("test_torch.py", ["pytest", "numpy", "torch", "torch.distributed"]),
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in GROUPS:
        print(f"usage: {sys.argv[0]} {'|'.join(GROUPS)} [pytest args...]", file=sys.stderr)
        return 2
    path, needs = GROUPS[sys.argv[1]]
    for mod in needs:
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            print(f"SKIP: python tests '{sys.argv[1]}' need the module {mod} ({exc}); "
                  f"on Debian: apt-get install python3-{mod.split('.')[0]}")
            return 77
    if sys.argv[1] == "torch":
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            print("SKIP: torch.distributed with gloo is not available")
            return 77
    import homa  # noqa: F401  (fails loudly if the extension is broken)
    import pytest

    # -p no:cacheprovider: don't write .pytest_cache into the source tree.
    return pytest.main(["-q", "-p", "no:cacheprovider", os.path.join(HERE, path)] + sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())

"""The ``refscore`` console script: the CLI's own main, in this process."""

import signal
import sys

from . import _native


def main() -> None:
    # Like the native binary: Ctrl-C ends the process at once (Python's
    # handler would only run after the Rust code returns).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.main(["refscore", *sys.argv[1:]]))


if __name__ == "__main__":
    main()

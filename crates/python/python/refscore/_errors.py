"""The one exception refscore raises, and the CLI's exit codes."""

from . import _native

#: Exit codes by class, from the Rust table the CLI uses (``refscore --help``).
EXIT_CODES = dict(_native.EXIT_CODES)
USAGE = EXIT_CODES["usage"]
BAD_INPUT = EXIT_CODES["bad_input"]
MISSING = EXIT_CODES["missing"]
UNAVAILABLE = EXIT_CODES["unavailable"]
INTERNAL = EXIT_CODES["internal"]
IO = EXIT_CODES["io"]
TEMPORARY = EXIT_CODES["temporary"]
DENIED = EXIT_CODES["denied"]
CONFIG = EXIT_CODES["config"]


class RefscoreError(Exception):
    """A refscore error: ``message`` is the CLI's one-line message and
    ``exit_code`` the exit code the CLI would have returned (see
    :data:`EXIT_CODES`: usage 64, bad input 65, missing in the object store
    66, store unreachable 69, internal 70, I/O 74, temporary 75, store
    refused the credentials 77, configuration 78)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __reduce__(self):
        # Picklable, so it survives the trip from a Ray worker to the driver.
        return (type(self), (self.message, self.exit_code))

    def __str__(self) -> str:
        return self.message

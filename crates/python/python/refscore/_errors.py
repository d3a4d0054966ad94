"""The one exception refscore raises."""


class RefscoreError(Exception):
    """A refscore error: ``message`` is the CLI's one-line message and
    ``exit_code`` the exit code the CLI would have returned (64 usage,
    65 bad input, 70 internal, 74 I/O, 75 temporary, 78 configuration)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __reduce__(self):
        # Picklable, so it survives the trip from a Ray worker to the driver.
        return (type(self), (self.message, self.exit_code))

    def __str__(self) -> str:
        return self.message

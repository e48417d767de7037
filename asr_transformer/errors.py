"""The one error type a user is shown: a mistake in what they gave (a file, a line of it, an option).

Every module's own error (ManifestError, AudioError, ConfigError, ...) derives from UserError. The command line
prints its message as one line, `error: <message>`, and exits with status 1; no traceback. The message names the
file, line, utterance or option, and what to do.
"""


class UserError(Exception):
    """A mistake in the input or the options, explained by the message."""


class DecodeError(UserError, ValueError):
    """A decoding request that cannot run (a mode, an option, a model that lacks what it needs); the message says
    what to change."""

"""Errors of the Chakra ET codec.

`ChakraFormatError` is the one public error: a file (or byte string) that is not a valid
Chakra ET trace. `WireError` is internal: raised deep inside the decoder with an offset
relative to the message being parsed, and turned into a `ChakraFormatError` (with the
absolute offset and the source name) by the frame loop.
"""

from __future__ import annotations


class ChakraFormatError(ValueError):
    """Bytes that are not a valid Chakra ET trace.

    The message reads `<source>: <what> at byte <offset>: <detail>`; the parts are also
    available as attributes.
    """

    def __init__(self, source: str, what: str, offset: int, detail: str) -> None:
        super().__init__(f"{source}: {what} at byte {offset}: {detail}")
        self.source = source
        self.what = what
        self.offset = offset
        self.detail = detail


class WireError(Exception):
    """A malformed protobuf encoding at `offset` bytes into the message being parsed."""

    def __init__(self, detail: str, offset: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.offset = offset

    def shift(self, base: int) -> WireError:
        """Make the offset relative to an enclosing buffer in which this one starts at `base`."""
        self.offset += base
        return self

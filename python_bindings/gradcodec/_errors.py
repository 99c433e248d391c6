# SPDX-License-Identifier: Apache-2.0
"""The exception every failed library call raises."""

from __future__ import annotations

from typing import Union

from ._gradcodec import StatusCode


class Error(ValueError, RuntimeError):
    """A gradcodec call failed.

    ``str(error)`` is the library's message and ``error.code`` its :class:`StatusCode`
    (``StatusCode.corrupt_frame``, ``StatusCode.invalid_spec``, ...). It derives from both
    ValueError and RuntimeError, so existing handlers for either catch it.
    """

    code: StatusCode

    def __init__(self, message: str, code: Union[StatusCode, int] = StatusCode.internal_error):
        super().__init__(message)
        self.code = StatusCode(code)

    def __reduce__(self):
        return (type(self), (str(self), int(self.code)))

"""Receipt handles of the pop service: what ReceiveMessage hands out and AckMessage,
ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue take back.

A handle is the urlsafe base64 (unpadded) of ``"v1 <source topic> <queue id> <queue offset>
<pop time ms> <invisible ms> <incarnation> <sequence>"``; fields are group-independent. The
sequence grows with every delivery and every change of invisible time and the incarnation is
random per PopService, so a handle names one delivery only. Expired: pop time + invisible <= now.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

HANDLE_VERSION = "v1"
RECEIPT_HANDLE_LENGTH_MAX = 1024


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    source_topic: str
    queue_id: int
    queue_offset: int
    pop_time_ms: int
    invisible_ms: int
    incarnation: str
    sequence: int

    @property
    def expire_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    def encode(self) -> str:
        text = (
            f"{HANDLE_VERSION} {self.source_topic} {self.queue_id} {self.queue_offset} "
            f"{self.pop_time_ms} {self.invisible_ms} {self.incarnation} {self.sequence}"
        )
        return base64.urlsafe_b64encode(text.encode("ascii")).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle | None:
        """None for anything that is not a well-formed handle."""
        if not text or len(text) > RECEIPT_HANDLE_LENGTH_MAX:
            return None
        try:
            parts = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii").split(" ")
        except (binascii.Error, ValueError):
            return None
        if len(parts) != 8 or parts[0] != HANDLE_VERSION:
            return None
        try:
            queue_id, queue_offset, pop_time_ms, invisible_ms, sequence = (int(parts[i]) for i in (2, 3, 4, 5, 7))
        except ValueError:
            return None
        return cls(parts[1], queue_id, queue_offset, pop_time_ms, invisible_ms, parts[6], sequence)

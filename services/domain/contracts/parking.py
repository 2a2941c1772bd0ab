"""Parking: a message held in a system topic until it may be delivered keeps its real topic and
queue in the ``REAL_TOPIC`` and ``REAL_QID`` properties (RocketMQ's put hooks for delay-level,
timer and transactional messages).

``park`` writes them; ``real_destination`` reads them back. Delivery does not remove them: a
Java broker builds the delivered record's properties string before it clears them, so the
delivered record carries them too, and so does ours.
"""

from __future__ import annotations

from services.domain.format.properties_format import REAL_QUEUE_ID, REAL_TOPIC


def park(properties: dict[str, str], topic: str, queue_id: int) -> None:
    """Record the real ``topic`` and ``queue_id`` in ``properties`` (REAL_TOPIC, then REAL_QID)."""
    properties[REAL_TOPIC] = topic
    properties[REAL_QUEUE_ID] = str(queue_id)


def real_destination(properties: dict[str, str]) -> tuple[str, int] | None:
    """(REAL_TOPIC, REAL_QID) of a parked message; None if either is missing or malformed."""
    topic = properties.get(REAL_TOPIC)
    queue_text = properties.get(REAL_QUEUE_ID)
    if not topic or queue_text is None:
        return None
    try:
        queue_id = int(queue_text)
    except ValueError:
        return None
    return (topic, queue_id) if queue_id >= 0 else None

"""The owner's changefeed scheduler: a pure function from what etcd says to what to change.

Whole changefeeds are the unit (TiCDC schedules table spans; one capture runs all of a
changefeed's tables here, since each capture tails the whole binlog anyway). A move is two
steps, like TiCDC's Replicating -> Removing -> Absent -> Prepare: the owner marks the assignment
`stopping`, the capture stops and deletes it, and only then is the changefeed assigned again,
so two captures never run it at once on purpose. A paused changefeed leaves its capture the same
way; only a removed changefeed's or a dead capture's assignment is deleted by the owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sparkcdc.model.gtid import newer, parse_state
from sparkcdc.model.position import BinlogPosition

REPLICATING = "replicating"
STOPPING = "stopping"
RUNNABLE_STATES = ("normal", "warning")


@dataclass(frozen=True)
class CaptureView:
    id: str
    draining: bool = False
    index_start: str = ""  # where the capture's transaction index begins ("" = unknown)
    index_start_gtid: str = ""  # the upstream's GTID state there ("" = unknown)


@dataclass(frozen=True)
class ChangefeedView:
    namespace: str
    id: str
    state: str
    checkpoint_position: str = ""
    checkpoint_gtid: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.id)


@dataclass(frozen=True)
class Assignment:
    capture_id: str
    state: str = REPLICATING
    mod_revision: int = 0


@dataclass(frozen=True)
class Action:
    kind: str  # "assign" | "unassign" | "stop"
    namespace: str
    changefeed_id: str
    capture_id: str
    mod_revision: int = 0  # of the assignment it replaces (unassign, stop)


def can_resume(capture: CaptureView, changefeed: Optional[ChangefeedView]) -> bool:
    """A capture can resume a changefeed only if its index reaches back to the checkpoint: by
    GTID state when both are known (positions of two servers do not compare), else by position."""
    if changefeed is None:
        return True
    if capture.index_start_gtid and changefeed.checkpoint_gtid:
        return newer(parse_state(changefeed.checkpoint_gtid), parse_state(capture.index_start_gtid)) is not None
    if not capture.index_start or not changefeed.checkpoint_position:
        return True
    return BinlogPosition.parse(capture.index_start).key() <= BinlogPosition.parse(changefeed.checkpoint_position).key()


def plan(captures: list[CaptureView], changefeeds: list[ChangefeedView],
         assignments: dict[tuple[str, str], Assignment]) -> list[Action]:
    alive = {c.id: c for c in captures}
    feeds = {cf.key: cf for cf in changefeeds}
    actions: list[Action] = []
    load = {c.id: 0 for c in captures}
    placed: dict[tuple[str, str], Assignment] = {}
    for key, assignment in sorted(assignments.items()):
        feed = feeds.get(key)
        capture = alive.get(assignment.capture_id)
        if feed is None or capture is None:
            actions.append(Action("unassign", *key, assignment.capture_id, assignment.mod_revision))
            continue
        if feed.state not in RUNNABLE_STATES:
            # Paused (or failed, finished) on a live capture: stopped in two steps like a move, so
            # the batch in flight writes its checkpoint under the assignment before the capture
            # deletes it; deleted at once, the resume would replay that batch.
            if assignment.state == REPLICATING:
                actions.append(Action("stop", *key, capture.id, assignment.mod_revision))
            continue
        placed[key] = assignment
        load[capture.id] += 1
        if capture.draining and assignment.state == REPLICATING:
            actions.append(Action("stop", *key, capture.id, assignment.mod_revision))

    targets = [c for c in captures if not c.draining]
    for feed in sorted(changefeeds, key=lambda cf: cf.key):
        if feed.state not in RUNNABLE_STATES or feed.key in placed:
            continue
        eligible = [c for c in targets if can_resume(c, feed)]
        if not eligible:
            continue
        chosen = min(eligible, key=lambda c: (load[c.id], c.id))
        load[chosen.id] += 1
        actions.append(Action("assign", *feed.key, chosen.id))

    moving = any(a.state == STOPPING for a in placed.values()) or any(a.kind != "unassign" for a in actions)
    if not moving and len(targets) > 1:
        busiest = max(targets, key=lambda c: (load[c.id], c.id))
        idlest = min(targets, key=lambda c: (load[c.id], c.id))
        if load[busiest.id] - load[idlest.id] >= 2:
            key = max(k for k, a in placed.items() if a.capture_id == busiest.id)
            if can_resume(idlest, feeds[key]):
                actions.append(Action("stop", *key, busiest.id, placed[key].mod_revision))
    return actions

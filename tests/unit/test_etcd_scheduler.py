"""The owner's scheduling rules, without etcd: assign, fail over, drain, balance, eligibility."""

from sparkcdc.server.scheduler import STOPPING, Action, Assignment, CaptureView, ChangefeedView, can_resume, plan


def feed(name, state="normal", position=""):
    return ChangefeedView("default", name, state, position)


def test_unassigned_changefeeds_go_to_the_least_loaded_capture():
    captures = [CaptureView("a"), CaptureView("b")]
    actions = plan(captures, [feed("f1"), feed("f2"), feed("f3")], {("default", "f1"): Assignment("a", mod_revision=7)})
    assert actions == [Action("assign", "default", "f2", "b"), Action("assign", "default", "f3", "a")]


def test_a_dead_captures_changefeed_is_unassigned_and_reassigned_in_one_pass():
    actions = plan([CaptureView("b")], [feed("f1")], {("default", "f1"): Assignment("a", mod_revision=9)})
    assert actions == [Action("unassign", "default", "f1", "a", 9), Action("assign", "default", "f1", "b")]


def test_removed_changefeeds_lose_their_assignment_and_paused_ones_are_stopped_first():
    assignments = {("default", "f1"): Assignment("a", mod_revision=3), ("default", "gone"): Assignment("a", mod_revision=4)}
    actions = plan([CaptureView("a")], [feed("f1", state="stopped")], assignments)
    assert actions == [Action("stop", "default", "f1", "a", 3), Action("unassign", "default", "gone", "a", 4)]
    # Stopping: left to the capture, which deletes it once stopped; on a dead capture deleted.
    assert plan([CaptureView("a")], [feed("f1", state="stopped")], {("default", "f1"): Assignment("a", STOPPING, 5)}) == []
    assert plan([CaptureView("b")], [feed("f1", state="stopped")], {("default", "f1"): Assignment("a", STOPPING, 5)}) \
        == [Action("unassign", "default", "f1", "a", 5)]


def test_drain_stops_first_and_assigns_elsewhere_only_after_the_capture_let_go():
    captures = [CaptureView("a", draining=True), CaptureView("b")]
    assert plan(captures, [feed("f1")], {("default", "f1"): Assignment("a", mod_revision=5)}) == [
        Action("stop", "default", "f1", "a", 5)]
    # While it is stopping nothing else happens to it.
    assert plan(captures, [feed("f1")], {("default", "f1"): Assignment("a", STOPPING, 6)}) == []
    # The capture deleted the assignment: now it goes to b, never back to the draining a.
    assert plan(captures, [feed("f1")], {}) == [Action("assign", "default", "f1", "b")]


def test_balance_moves_one_changefeed_at_a_time():
    assignments = {("default", f"f{i}"): Assignment("a", mod_revision=i) for i in range(3)}
    captures = [CaptureView("a"), CaptureView("b")]
    feeds = [feed(f"f{i}") for i in range(3)]
    assert plan(captures, feeds, assignments) == [Action("stop", "default", "f2", "a", 2)]
    assignments[("default", "f2")] = Assignment("a", STOPPING, 10)
    assert plan(captures, feeds, assignments) == []


def test_a_capture_whose_index_starts_after_the_checkpoint_cannot_resume_it():
    late = CaptureView("late", index_start="mysql-bin.000002:500")
    early = CaptureView("early", index_start="mysql-bin.000001:900")
    cf = feed("f1", position="mysql-bin.000002:100")
    assert not can_resume(late, cf) and can_resume(early, cf)
    assert plan([early, late], [cf], {}) == [Action("assign", "default", "f1", "early")]
    assert plan([late], [cf], {}) == []


def test_across_a_failover_the_gtid_state_decides_whether_a_capture_can_resume_a_changefeed():
    """Binlog positions of two servers do not compare; GTID states do (docs/failover.md)."""
    index_from_50 = CaptureView("c", index_start="mysql-bin.000009:4", index_start_gtid="0-1-50")
    at = lambda gtid: ChangefeedView("default", "f1", "normal", "mysql-bin.000001:100", gtid)  # noqa: E731
    assert can_resume(index_from_50, at("0-2-60")), "after the index's start (the new primary's GTIDs)"
    assert can_resume(index_from_50, at("0-1-50"))
    assert not can_resume(index_from_50, at("0-1-40")), "before the index's start"
    assert can_resume(index_from_50, at("0-1-60,1-1-3")), "a domain that began after the index's start"
    assert can_resume(CaptureView("old"), at("0-1-40")), "an index that does not know its start: any"

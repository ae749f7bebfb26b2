"""Leases (engine/leases.py): two curators on one queue are not handed the same item at the same time; leases end
after their time, when the holder moves on, and anonymous sessions neither take nor are refused one."""

from __future__ import annotations

from engine.leases import LeaseBook


def test_two_curators_never_hold_one_item_and_leases_expire():
    now = [0.0]
    book = LeaseBook(ttl_s=60, clock=lambda: now[0])
    q = ("pair", "run", 1)
    assert book.claim(q, "a", "ann") is None
    assert book.claim(q, "a", "bob") == "ann"  # refused, and told who has it
    assert book.taken(q, ["a", "b"], "bob") == {"a"} and book.taken(q, ["a", "b"], "ann") == set()
    assert book.claim(q, "a", "ann") is None  # one's own item again: renewed
    assert book.claim(q, "b", "ann") is None  # moving on releases "a"
    assert book.claim(q, "a", "bob") is None
    assert book.claim(("verdict", "run", 1), "a", "ann") is None  # queues are independent
    now[0] = 61.0
    assert book.claim(q, "b", "bob") is None  # ann's lease on "b" ran out
    assert book.taken(q, ["a", "b"], "ann") == {"b"}
    assert book.claim(q, "b", None) is None and book.taken(q, ["b"], None) == set()  # anonymous: no effect
    assert book.claim(("verdict", "run", 1), "v", "bob") is None
    book.release("bob")  # bob corrected his name: everything the old one held is free, in every queue
    assert book.taken(q, ["a", "b"], "ann") == set() and book.claim(("verdict", "run", 1), "v", "ann") is None
    book.release(None)  # anonymous: nothing to release

"""Keyboard-only curation: the shortcut script the studio passes to ``launch(head=...)`` and the queue walk.

Keys (outside text fields, no modifier): ``j``/``k`` next/previous item, ``y`` looks right (reviewed), ``r``
restore, ``u`` undo this curator's last action (both tabs); ``s`` swap, ``x`` exclude, ``t`` tie, ``v`` evidence
(Pairs); ``a``/``c`` accept the original/the correction, ``d`` drop, ``e`` edit (focuses the editor) (Critic).
A key clicks the first *visible* button it names, so one key serves whichever tab is open. ``neighbour`` is the
server side of ``j``/``k``.
"""

from __future__ import annotations

import json

# key -> element ids, first visible wins (hidden tabs' buttons have no offsetParent)
KEYS: dict[str, list[str]] = {
    "j": ["pairs-next", "critic-next"], "k": ["pairs-prev", "critic-prev"], "u": ["pairs-undo", "critic-undo"],
    "s": ["pairs-swap"], "x": ["pairs-exclude"], "t": ["pairs-tie"], "r": ["pairs-restore", "critic-restore"],
    "v": ["pairs-evidence"], "a": ["critic-keep_original"], "c": ["critic-accept_correction"],
    "d": ["critic-drop"], "y": ["pairs-reviewed", "critic-reviewed"],
}
FOCUS: dict[str, str] = {"e": "critic-edit"}  # keys that move the focus into a text field instead of clicking

SHORTCUTS_JS = """<script>
(() => {
const KEYS = @KEYS@, FOCUS = @FOCUS@;
document.addEventListener('keydown', (e) => {
  const tag = (e.target && e.target.tagName || '').toLowerCase();
  if (tag === 'input' || tag === 'textarea' || e.target.isContentEditable) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  if (FOCUS[e.key]) {
    const box = document.querySelector('#' + FOCUS[e.key] + ' textarea, #' + FOCUS[e.key] + ' input');
    if (box && box.offsetParent !== null) { box.focus(); e.preventDefault(); }
    return;
  }
  for (const id of (KEYS[e.key] || [])) {
    const el = document.getElementById(id);
    if (el && el.offsetParent !== null) { el.click(); e.preventDefault(); return; }
  }
});
})();
</script>""".replace("@KEYS@", json.dumps(KEYS)).replace("@FOCUS@", json.dumps(FOCUS))


def neighbour(current: str | None, keys: list[str], page: int, total: int, delta: int,
              page_size: int, skip: set[str] | frozenset[str] = frozenset()) -> tuple[str | None, int]:
    """``(key, page)`` the next item before/after ``current`` in the listed order that is not in ``skip`` (items
    another curator holds, ``engine.leases``); past either end of the page, the neighbouring page (whose first item
    the reload then picks). At the very first/last item nothing moves."""
    i = keys.index(current) + delta if current in keys else 0
    while 0 <= i < len(keys) and keys[i] in skip:
        i += delta if delta else 1
    if 0 <= i < len(keys):
        return keys[i], page
    if i >= len(keys) and page * page_size < total:
        return None, page + 1
    if i < 0 and page > 1:
        return None, page - 1
    return current, page


def action_words(action: str) -> str:
    """A stored override action as words for a message ("keep_original" -> "accept original")."""
    return {"reviewed": "review", "keep_original": "accept original"}.get(action, action.replace("_", " "))

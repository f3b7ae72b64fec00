"""A text panel that repaints only the lines whose markup changed, and lays the screen out again
only when its height changed; a height that shrinks waits ``HOLD_S`` first.

Why not a plain ``Static.update``: that re-renders every line of the panel and Textual restyles
each of them, about 0.3 ms a line (bench/tui.py), every second, for panels whose lines mostly
did not change (an engine's name, a lane's limits). Here each line of markup is parsed and drawn
once and its strips kept while the line stays the same; a new frame marks only the lines whose
strips changed as dirty, so Textual redraws just those.

The markup is read line by line: a style opened on one line ends with it (every panel builds
its text as whole lines joined by newlines; tests check the two readings agree).
"""

from __future__ import annotations

import time
from functools import lru_cache
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

from textual import events
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget
from textual.widgets import Static

from gpuwatch.tui.markup import content as content_of

if TYPE_CHECKING:
    from textual.selection import Selection


# How long a panel keeps the height of its tallest text once the text is shorter.
HOLD_S = 30.0


class Panel(Static):
    class Resized(Message):
        """The panel took another size on screen (its column may lay its panels out anew)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # No panel holds links, and Textual's pass that styles them copies every strip drawn
        # (a third of the cost of drawing a line).
        self.auto_links = False
        self._shown: str | None = None
        self._rows: list[str] = []  # the markup, one entry a line
        self._drawn: dict[str, list[Strip]] = {}  # line markup -> its strips, for _drawn_for
        self._drawn_for: tuple[object, ...] | None = None  # (width, style, theme) drawn at
        self._strips: list[Strip] = []  # what the panel shows now, a strip a screen line
        self._blank = Strip.blank(0)  # a held line, in the panel's style
        self._held = 0  # blank lines kept below the text (HOLD_S)
        self._lines: tuple[int, int] | None = None  # (width, height) it was laid out for
        self.layouts = 0  # updates that asked for a layout pass (tests and bench/tui.py)
        self.repainted = 0  # screen lines marked for a repaint (tests and bench/tui.py)
        self._tallest = (0, 0, 0.0)  # (width, lines, when it last took that many)
        self.room: int | None = None  # lines it may take at most (column.py), None: any
        self._wants = 0  # the lines its text would take in full, told to its column
        self.clock = time.monotonic

    @property
    def markup(self) -> str:
        """What the panel shows now, as markup."""
        return self._shown or ""

    def show(self, markup: str) -> None:
        if markup == self._shown:
            return
        self._shown = markup
        self._rows = markup.split("\n")
        if not self.size.width:  # not laid out yet: the first layout draws it
            self._drawn_for = None
            self.layouts += 1
            self.refresh(layout=True)
            return
        old = self._strips
        text = self._draw()
        # A layout pass (every widget on the screen measured and placed again) costs several
        # times a repaint; a value that changed in place needs only its lines repainted. So: a
        # layout only when the panel's own size changes, i.e. its height follows its text and
        # the text now takes another number of lines at this width.
        lines = self._lines_for(len(text))
        self._held = 0
        if lines is not None and lines[1] >= 0:
            lines = self._hold(lines)
            self._held = lines[1] - len(text)
        self._strips = text + [self._blank] * self._held
        if lines is None or lines != self._lines:
            self._lines = lines
            self.layouts += 1
            self.refresh(layout=True)
            return
        width = self.size.width
        dirty = [
            Region(0, y, width, 1)
            for y, (was, now) in enumerate(zip_longest(old, self._strips))
            if was is not now and was != now
        ]
        if dirty:
            self.repainted += len(dirty)
            self.refresh(*dirty)

    def _hold(self, lines: tuple[int, int]) -> tuple[int, int]:
        """Keep the panel at its tallest for ``HOLD_S``: a line that comes and goes with the
        load (an engine's ``fits ~N more sessions`` when it idles between requests) would
        otherwise move every panel below it, and lay the screen out, every few seconds."""
        if self.has_class("keep"):
            # The kept panel (the lanes) shows its own lines and no blank ones: rows it gives
            # up go back to the panels above it (KeepInView), and a blank line held after a
            # key's ``sending:`` line would make the live screen differ from its replay,
            # which has the recorded state but not the keys pressed.
            return lines
        now = self.clock()
        width, height = lines
        held_width, held_height, since = self._tallest
        if width == held_width and height < held_height and now - since < HOLD_S:
            # Never held past its room: blank lines there would push the kept panel down. Nor
            # past the rows its column has free: a held blank line that made the column scroll
            # would push a line of another panel (its last) out of view for the whole hold.
            cap = min(held_height, self.room or held_height, height + self._free_rows(height))
            if cap > height:
                return (width, cap)
        self._tallest = (width, height, now)
        return lines

    def _free_rows(self, height: int) -> int:
        """Rows the panel's parent would have to spare, this panel taking ``height`` lines: what
        the parent shows less what its children take (each as laid out, this one at
        ``height``)."""
        parent = self.parent
        if not isinstance(parent, Widget) or not parent.size.height:
            return 0  # not laid out: nothing is known to be free
        taken = max(
            (c.virtual_region_with_margin.bottom for c in parent.children if c.display),
            default=0,
        )
        return parent.scrollable_content_region.height - (taken - self.size.height + height)

    @property
    def held(self) -> int:
        """Blank lines it keeps below its text now (``HOLD_S``)."""
        return self._held

    def let_go(self) -> None:
        """Stop holding blank lines (its column has no row for them), laid out again at once."""
        if not self._held or self._lines is None:
            return
        self._tallest = (self._lines[0], self._lines[1] - self._held, self.clock())
        markup, self._shown = self._shown, None
        self.show(markup or "")

    def _lines_for(self, height: int) -> tuple[int, int] | None:
        """(width, height) the text takes here; None when that is unknown (a width that
        follows the content)."""
        styles = self.styles
        if styles.width is not None and styles.width.is_auto:
            return None
        if styles.height is not None and not styles.height.is_auto:
            return (self.size.width, -1)  # a fixed height: the text never moves the layout
        return (self.size.width, height)

    def _draw(self, width: int | None = None) -> list[Strip]:
        """The strips of the text at ``width`` (default: the panel's own), each line drawn
        afresh only if it was not drawn before at this width, in this style and theme. At the
        panel's own width they become what it shows."""
        own = width is None or width == self.size.width
        width = self.size.width if width is None else width
        style = self.visual_style
        key = (width, style, self.app.theme)
        if self.text_selection is not None:
            # A selection spans lines: the text is drawn whole, as a Static draws it.
            strips = Visual.to_strips(self, self.render(), width, None, style)
            keep: dict[str, list[Strip]] = {}
        else:
            drawn = self._drawn if key == self._drawn_for else {}
            keep = {}
            strips = []
            for row in self._rows:
                found = keep.get(row) or drawn.get(row)
                if found is None:
                    found = Visual.to_strips(self, content_of(row), width, None, style)
                    found = found or [Strip.blank(0)]
                    keep[row] = found
                strips.extend(found)
        if own:
            if key != self._drawn_for:
                self._blank = Strip.blank(width, style.rich_style)
            self._drawn, self._drawn_for = keep, key
            self._strips = strips + [self._blank] * self._held
        return strips

    def on_resize(self, _event: events.Resize) -> None:
        self.post_message(self.Resized())

    def give_way(self, lines: int | None) -> None:
        """Take at most ``lines`` lines from now on (column.py), drawn again at once."""
        if lines == self.room:
            return
        self.room = lines
        self._shown = None  # shown anew even if the text is the same: a held height may go
        self.redraw()

    def redraw(self) -> None:
        """Draw the panel's last data again (a panel that fits its text to a room)."""

    def wants(self, lines: int) -> None:
        """The lines its text would take in full now. A change is told to its column as a
        resize is: it may share its lines anew though no panel changed size (column.py)."""
        if lines != self._wants:
            self._wants = lines
            self.post_message(self.Resized())

    # Textual's side: the panel is measured and drawn from the strips above.

    def render(self) -> Content:
        return Content("\n").join(content_of(row) for row in self._rows)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((content_of(row).cell_length for row in self._rows), default=0)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        held = self._held if self._lines is not None and self._lines[0] == width else 0
        return len(self._draw(width)) + held

    def render_line(self, y: int) -> Strip:
        if (self.size.width, self.visual_style, self.app.theme) != self._drawn_for:
            self._draw()  # resized, restyled or another theme: every line drawn again
        return self._strips[y] if y < len(self._strips) else self._blank

    def notify_style_update(self) -> None:
        self._drawn_for = None
        super().notify_style_update()

    def selection_updated(self, selection: Selection | None) -> None:
        self._drawn_for = None
        super().selection_updated(selection)


def usable_width(widget: Static) -> int:
    """Cells a panel's lines may take: its content width, less a scrollbar's the column may
    grow, so a flowed line never wraps a second time."""
    return max(40, (widget.content_region.width or 80) - 2)


@lru_cache(maxsize=1024)
def cells(markup: str) -> int:
    """Cells a markup string takes on screen (cached: panels repeat their segments)."""
    return content_of(markup).cell_length


def wrapped(lines: list[str], width: int) -> int:
    """Screen lines that markup lines take in ``width`` cells (a longer line wraps)."""
    return sum(max(1, -(-cells(line) // max(1, width))) for line in lines)


def flow(segments: list[str], width: int, indent: str = "  ", gap: str = "  ") -> list[str]:
    """Pack markup segments into lines of at most ``width`` cells, never splitting one."""
    lines: list[str] = []
    current, used = "", 0
    for seg in segments:
        size = cells(seg)
        if current and used + len(gap) + size > width:
            lines.append(current)
            current, used = "", 0
        if current:
            current += gap + seg
            used += len(gap) + size
        else:
            current = indent + seg
            used = len(indent) + size
    if current:
        lines.append(current)
    return lines

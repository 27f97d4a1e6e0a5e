"""Progress reporting for long calls (upsert, and the example's index build).

`progress=` takes None (silent), True (a bar on stderr when stderr is a terminal, silent
otherwise) or a callable `progress(done, total)` called with the number of points sent so
far and the total after each message goes out.
"""
import sys
import time


class ProgressBar:
    """A one-line text bar with rate and ETA: `label [#####.....]  45% 27000/60000 9800/s ETA 3s`."""

    def __init__(self, label="upsert", stream=None, width=30, unit="/s"):
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.unit = unit
        self.start = time.monotonic()
        self._last = 0.0

    def __call__(self, done, total):
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return  # at most ten redraws a second
        self._last = now
        frac = done / total if total else 1.0
        filled = int(self.width * frac)
        elapsed = max(now - self.start, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else 0.0
        line = (f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {frac:4.0%} "
                f"{done}/{total} {rate:,.0f}{self.unit} ETA {eta:.0f}s ")
        self.stream.write(line)
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def reporter(progress, label="upsert"):
    """The callable for a `progress=` argument, or None."""
    if progress is None or progress is False:
        return None
    if progress is True:
        stream = sys.stderr
        return ProgressBar(label, stream) if stream.isatty() else None
    if callable(progress):
        return progress
    raise TypeError("progress: expected None, True or a callable progress(done, total)")

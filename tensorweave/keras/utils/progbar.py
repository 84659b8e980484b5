"""The Keras progress bar.

On a terminal (verbose=1) one line is redrawn in place::

    938/938 ━━━━━━━━━━━━━━━━━━━━ 2s 2ms/step - accuracy: 0.9100 - loss: 0.2900

When output is not a terminal, the same text without colour codes is written once, when
the bar completes. verbose=2 writes one line per epoch::

    938/938 - 2s - 2ms/step - accuracy: 0.9100 - loss: 0.2900

>>> import io
>>> out = io.StringIO()
>>> bar = Progbar(3, verbose=2, stream=out)
>>> for i in range(1, 4):
...     bar.update(i, [("loss", 0.5)])
>>> out.getvalue().startswith("3/3 - ")
True
"""
import math
import sys
import time

import numpy as np

from tensorweave.keras.utils import io_utils

BAR = "\u2501"


def format_time_per_unit(seconds, unit="step"):
    if seconds >= 1 or seconds == 0:
        return f"{seconds:.0f}s/{unit}"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.0f}ms/{unit}"
    return f"{seconds * 1e6:.0f}us/{unit}"


def format_value(v):
    return f"{v:.4f}" if abs(v) > 1e-3 else f"{v:.4e}"


def _eta(seconds):
    if seconds > 3600:
        return "%d:%02d:%02d" % (seconds // 3600, (seconds % 3600) // 60, seconds % 60)
    if seconds > 60:
        return "%d:%02d" % (seconds // 60, seconds % 60)
    return "%ds" % seconds


class Progbar:
    """A progress bar for ``target`` steps (None if unknown); values are averaged over steps
    unless named in ``stateful_metrics``."""

    def __init__(self, target, width=20, verbose=1, interval=0.05, stateful_metrics=None, unit_name="step",
                 stream=None):
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        self.stateful_metrics = set(stateful_metrics or ())
        self.stream = stream if stream is not None else sys.stdout
        self.dynamic = bool(getattr(self.stream, "isatty", lambda: False)()) and \
            io_utils.is_interactive_logging_enabled()
        self._values = {}
        self._order = []
        self._seen = 0
        self._start = time.time()
        self._last_update = 0.0
        self._after_first = None
        self._prev_width = 0

    def _step_time(self, current, now):
        if not current:
            return 0.0
        if self._after_first is not None and current > 1:
            t = (now - self._after_first) / (current - 1)
        else:
            t = (now - self._start) / current
        if current == 1:
            self._after_first = now
        return t

    def update(self, current, values=None, finalize=None):
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        for k, v in values or ():
            if k not in self._order:
                self._order.append(k)
            v = float(np.mean(v))      # a per-class metric shows its mean, as Keras' bar does
            if k in self.stateful_metrics or finalize:
                self._values[k] = [v, 1]
            else:
                w = max(current - self._seen, 1)
                acc = self._values.setdefault(k, [0.0, 0])
                acc[0] += v * w
                acc[1] += w
        self._seen = current
        now = time.time()
        per_unit = self._step_time(current, now)
        if self.verbose == 1:
            if not finalize and (not self.dynamic or now - self._last_update < self.interval):
                return
            self._write_bar(current, now, per_unit, finalize)
        elif self.verbose == 2 and finalize and self.target:
            digits = int(math.log10(self.target)) + 1
            line = f"{current:{digits}d}/{self.target} - {now - self._start:.0f}s - " \
                   f"{format_time_per_unit(per_unit, self.unit_name)}{self._metrics_text()}\n"
            io_utils.write(line, self.stream)
        self._last_update = now

    def _metrics_text(self):
        out = ""
        for k in self._order:
            total, count = self._values[k]
            out += f" - {k}: {format_value(total / max(1, count))}"
        return out

    def _write_bar(self, current, now, per_unit, finalize):
        color = self.dynamic
        if self.target:
            digits = int(math.log10(self.target)) + 1
            count = f"{current:{digits}d}/{self.target}"
            done = int(self.width * min(current / self.target, 1.0))
            if color:
                bar = f"\x1b[1m{count}\x1b[0m " + (f"\x1b[32m{BAR * done}\x1b[0m" if done else "") + \
                      f"\x1b[37m{BAR * (self.width - done)}\x1b[0m"
            else:
                bar = f"{count} {BAR * self.width}"
            plain_bar = f"{count} {BAR * self.width}"
        else:
            bar = plain_bar = f"{current:7d}/Unknown"
        if self.target and not finalize:
            t = _eta(per_unit * (self.target - current))
        else:
            t = f"{now - self._start:.0f}s"
        info = f" {t} {format_time_per_unit(per_unit, self.unit_name)}{self._metrics_text()}"
        text = f" \x1b[1m{t}\x1b[0m" + info[len(t) + 1:] if color else info
        width = len(plain_bar) + len(info)
        msg = ""
        if color:
            msg = "\r" + bar + text
            if self._prev_width > width:
                msg += " " * (self._prev_width - width)
        else:
            msg = plain_bar + info
        if finalize:
            msg += "\n"
        io_utils.write(msg, self.stream)
        self._prev_width = width

    def add(self, n, values=None):
        self.update(self._seen + n, values)

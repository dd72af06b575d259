# SPDX-License-Identifier: MIT
"""vram.callbacks -- memory per epoch (Keras) and per step (any training loop).

MemoryCallback is a Keras callback: at the start of each epoch it resets the
peak and marks "epoch N" in the trace; at the end it logs the bytes in use
and their peak in MiB and keeps them in .history. It subclasses
tf.keras.callbacks.Callback when TensorFlow is importable (or Keras's own
class when Keras is already imported), and is otherwise a plain class with
the same methods, so it also works without TensorFlow. The class is made
on first use of the name MemoryCallback, so that `import vram` never
imports TensorFlow by itself.

StepMemoryHook does the same per step for a hand-written loop (PyTorch):

    hook = vram.StepMemoryHook()
    for step, batch in enumerate(loader):
        hook(step)            # ends the previous step, marks "step N"
        loss = model(batch).sum(); loss.backward(); opt.step()
    hook.end()                # the last step's record
    hook.records              # [{"step": 0, "current": ..., "peak": ...}, ...]

or, without keeping a hook, vram.track(step) in the loop.

Epochs are numbered from 1, as Keras prints them ("Epoch 1/10"); steps as
the loop numbers them. Figures are bytes; the log lines say MiB.
"""

import importlib.util
import sys

MiB = float(1 << 20)


def _callback_base():
    """Keras's Callback class if Keras can be had, else a stand-in."""
    for name in ("keras", "tensorflow"):
        if name not in sys.modules:
            continue
        try:
            if name == "keras":
                return sys.modules["keras"].callbacks.Callback
            return sys.modules["tensorflow"].keras.callbacks.Callback
        except Exception:
            pass
    try:
        if importlib.util.find_spec("tensorflow") is not None:
            import tensorflow as tf

            return tf.keras.callbacks.Callback
    except Exception:  # a broken TensorFlow install: do without it
        pass
    return _PlainCallback


class _PlainCallback:
    """What MemoryCallback needs of keras.callbacks.Callback, for programs
    without TensorFlow: the model and params slots and no-op hooks."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass


def _api():
    # The package imports this module at its end: look its functions up
    # at call time.
    import vram

    return vram


def _line(what, info):
    return "%s: vram current %.1f MiB, peak %.1f MiB" % (
        what,
        info["current"] / MiB,
        info["peak"] / MiB,
    )


class _MemoryCallbackMethods:
    """Per-epoch memory for Keras's model.fit(callbacks=[...]).

    device:     the device whose figures are read (see vram.get_memory_info)
    log:        called with one line per epoch ("Epoch 3: vram current
                120.0 MiB, peak 480.0 MiB"); None for silence
    reset_peak: reset the peak at the start of each epoch, so that each
                epoch's peak is its own (True) or the run's so far (False)
    After each epoch .history gets {"epoch": N, "current": bytes,
    "peak": bytes}.
    """

    def __init__(self, device=0, log=print, reset_peak=True):
        super().__init__()
        self.device = device
        self.log = log
        self.reset_peak = reset_peak
        self.history = []

    def on_epoch_begin(self, epoch, logs=None):
        vram = _api()
        if self.reset_peak:
            vram.reset_memory_stats(self.device)
        vram.mark("epoch %d" % (epoch + 1))

    def on_epoch_end(self, epoch, logs=None):
        info = _api().get_memory_info(self.device)
        record = {"epoch": epoch + 1, "current": info["current"], "peak": info["peak"]}
        self.history.append(record)
        if self.log is not None:
            self.log(_line("Epoch %d" % (epoch + 1), info))


class StepMemoryHook:
    """Per-step memory for a hand-written training loop.

    hook(step) (or hook.begin(step)) ends the step in progress, if any,
    then resets the peak (when reset_peak) and marks "step N". hook.end()
    reads the bytes in use and their peak, appends {"step", "current",
    "peak"} to .records, logs one line when LOG is given, and returns the
    record. `with hook.step(n): ...` does both around a block.
    """

    def __init__(self, device=0, log=None, reset_peak=True):
        self.device = device
        self.log = log
        self.reset_peak = reset_peak
        self.records = []
        self._current = None  # the step in progress, or None

    def begin(self, step):
        """Start STEP; returns the record of the step it ended, or None."""
        previous = self.end()
        vram = _api()
        if self.reset_peak:
            vram.reset_memory_stats(self.device)
        vram.mark("step %s" % (step,))
        self._current = step
        return previous

    __call__ = begin

    def end(self):
        """End the step in progress; returns its record (None if none)."""
        if self._current is None:
            return None
        info = _api().get_memory_info(self.device)
        record = {"step": self._current, "current": info["current"], "peak": info["peak"]}
        self._current = None
        self.records.append(record)
        if self.log is not None:
            self.log(_line("step %s" % (record["step"],), info))
        return record

    def step(self, step):
        """A context manager: begin(STEP) on entry, end() on exit."""
        hook = self

        class _Step:
            def __enter__(self):
                hook.begin(step)
                return hook

            def __exit__(self, *exc):
                hook.end()
                return False

        return _Step()


_memory_callback = None


def memory_callback_class():
    """MemoryCallback: _MemoryCallbackMethods on Keras's Callback (or the
    stand-in), made once."""
    global _memory_callback
    if _memory_callback is None:
        base = _callback_base()
        _memory_callback = type(
            "MemoryCallback",
            (_MemoryCallbackMethods, base),
            {"__doc__": _MemoryCallbackMethods.__doc__, "__module__": __name__},
        )
    return _memory_callback


def __getattr__(name):  # PEP 562: MemoryCallback is made on first use
    if name == "MemoryCallback":
        return memory_callback_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


_hooks = {}


def track(step, device=0):
    """StepMemoryHook without keeping one: track(step) at the top of each
    step of the loop. Returns the previous step's record (None for the
    first); track.hook(device) is the hook, with every record."""
    hook = _hooks.get(device)
    if hook is None:
        hook = _hooks[device] = StepMemoryHook(device)
    return hook.begin(step)


def _hook_of(device=0):
    hook = _hooks.get(device)
    if hook is None:
        hook = _hooks[device] = StepMemoryHook(device)
    return hook


track.hook = _hook_of

"""Changes to torch as undo records: apply all or nothing, revert in exact LIFO order.

A :class:`Change` knows how to apply itself and how to put back exactly what it found.
:func:`apply_all` applies a list in order and, if one fails, reverts the ones already
applied before re-raising; :func:`revert_all` reverts every record even when one fails and
raises one :class:`~inductor_knobs.errors.RevertError` listing all failures.

Interrupt safety (a ``KeyboardInterrupt`` may arrive at any line): a record is put on the
applied list *before* its ``apply`` runs, and every record's ``revert`` is idempotent and safe
on a record whose ``apply`` stopped part-way (it captures what it found first, and puts back
only what it captured).  So whatever line an interrupt hits, reverting the applied list puts
torch back exactly, and a revert that was itself interrupted can simply run again.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Protocol

from .errors import ExternalChangeWarning, KnobNotApplied, RevertError
from .patches.torch_2_4 import TorchPatches
from .why_not_applied import diagnose


class Change(Protocol):
    """One reversible change.  ``apply`` raises if it could not be made (and leaves nothing)."""

    @property
    def description(self) -> str: ...

    def apply(self) -> None: ...

    def revert(self) -> None: ...


_NOTHING = object()


class ConfigChange:
    """Set one key of a torch ``ConfigModule`` and put back its stored override on revert.

    Revert restores the raw stored state (including "unset"), not the value read before,
    so a key that was at its default is at its default again afterwards (torch's own
    ``config.patch`` pins it instead).
    """

    def __init__(self, patches: TorchPatches, cfg: ModuleType, key: str, value: object, *, process_wide: bool = False) -> None:
        self.patches = patches
        self.cfg, self.key = patches.resolve_alias(cfg, key)
        self.value = value
        self.process_wide = process_wide
        self._prior: object = _NOTHING
        self._restored = False

    @property
    def description(self) -> str:  # built when read (messages only), not at every plan
        return f"{self.cfg.__name__}.{self.key}={self.value!r}"

    def apply(self) -> None:
        # Written through torch's raw patcher, not setattr: a foreign __setattr__ on the config
        # module (Unsloth's rewrites the process default) would make the revert inexact.
        if self.process_wide:
            self._prior = self.patches.process_default_state(self.cfg, self.key)
            self.patches.set_process_default(self.cfg, self.key, self.value)
        else:
            self._prior = self.patches.read_override(self.cfg, self.key)
            self.patches.write_override(self.cfg, self.key, self.value)
        found = self._read()
        if found != self.value:
            cause = diagnose(self.patches, self.cfg, self.key)
            self._restore()
            raise KnobNotApplied(
                f"{self.description} did not take: it reads back {found!r}, because {cause}. "
                "Remove that cause or leave this knob out."
            )

    def revert(self) -> None:
        if self._prior is _NOTHING:  # apply stopped before it changed anything
            return
        found = self._read()
        if found != self.value and not self._restored:
            warnings.warn(
                f"{self.cfg.__name__}.{self.key} was changed to {found!r} inside the knobs block "
                f"(the block set {self.value!r}); restoring the value from before the block",
                ExternalChangeWarning,
                stacklevel=4,
            )
        self._restore()

    def _read(self) -> object:
        """The value Inductor reads now (implications and aliases included).

        A block's own override is in place whenever this runs (just written, or about to be
        rewritten by the revert), so a plain read cannot pin a copy of a mutable default, which is
        what :meth:`TorchPatches.read_value` guards against (and costs two more reads).
        """
        if self.process_wide:
            return self.patches.read_value(self.cfg, self.key)
        return getattr(self.cfg, self.key)

    def _restore(self) -> None:
        self._restored = True
        if self.process_wide:
            self.patches.restore_process_default(self.cfg, self.key, self._prior)
        else:
            self.patches.write_override(self.cfg, self.key, self._prior)


def apply_all(changes: Sequence[Change], applied: list[Change] | None = None) -> list[Change]:
    """Apply ``changes`` in order; on any failure (``KeyboardInterrupt`` too) revert what was applied and re-raise.

    Args:
        changes: the records, in apply order.
        applied: the list to record them in (a block's frame passes its own, so an interrupt
            between two lines of this function still leaves every touched record on it).

    Returns:
        ``applied``: the records in application order (pass it to :func:`revert_all`).
    """
    applied = [] if applied is None else applied
    try:
        for change in changes:
            applied.append(change)  # first: revert is safe on a record whose apply did not finish
            change.apply()
    except BaseException:
        try:
            revert_all(applied)
        except BaseException as err:  # noqa: BLE001 - keep the original error primary
            warnings.warn(f"while unwinding a failed apply: {err}", ExternalChangeWarning, stacklevel=2)
        raise
    return applied


def revert_all(applied: list[Change]) -> None:
    """Revert and pop ``applied`` last-first; every record is attempted even if one fails (``BaseException`` too).

    A record is popped only after its revert ran, so an interrupted call can run again and carry on
    where it stopped (reverts are idempotent).

    Raises:
        RevertError: one or more records failed to revert (all others were reverted).
        KeyboardInterrupt, SystemExit: re-raised after every record was attempted.
    """
    errors: list[BaseException] = []
    interrupted: BaseException | None = None
    while applied:
        for _ in range(3):  # an interrupt inside a revert: run that (idempotent) revert again
            try:
                applied[-1].revert()
                break
            except Exception as err:  # noqa: BLE001 - collected and re-raised below
                errors.append(err)
                break
            except BaseException as err:  # noqa: BLE001 - finish every revert, re-raise below
                interrupted = interrupted or err
        applied.pop()
    if interrupted is not None:
        raise interrupted
    if errors:
        raise RevertError(
            f"{len(errors)} change(s) could not be reverted: " + "; ".join(f"{type(e).__name__}: {e}" for e in errors),
            errors,
        )

"""Blocks: one object that is a context manager, a decorator (functions, coroutines, generators,
async generators) and ``start()``/``stop()``, whose changes are undo records on a stack of frames.

Each active block (``ik.knobs``, ``ik.emulate_gpu``, recorders, guards) is a frame on its thread's or task's
stack (a ``ContextVar``); only its owner may end it (``NotBlockOwner``); a child task reads it while its
:class:`~.scope.Life` lasts.  Before torch 2.12 Inductor config is process-global: a block changing it takes a
:class:`~.changes.Claim`.  An out-of-order exit reverts the blocks above, itself, then re-applies those above;
an interrupted exit is finished, then re-raised; warnings wait until everything is restored.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import sys
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any, TypeVar

from ..errors import InvalidKnobValue, KnobsError, NotBlockOwner, torch_version
from . import torch_compat
from .attestation import unwrap_not_applied
from .changes import Claim
from .knobs import Knobs
from .plan import plan
from .scope import Life, Lived, current_owner, describe_owner
from .undo import Change, Undo, apply_all, revert_all, reverting

F = TypeVar("F", bound=Callable[..., Any])
Owner = tuple[int, "int | None"]


class _Frame:
    """One active block: its records, owner, life (enter to exit), and whether it is suspended (reverted
    while a block below it unwinds, to be applied again)."""

    __slots__ = ("applied", "context", "entered", "life", "owner", "suspended")

    def __init__(self, context: UndoContext, owner: Owner) -> None:
        self.context = context
        self.owner = owner
        self.applied: list[Undo] = []
        self.suspended = False
        self.life = Life()
        #: A token of :data:`_ENTERED` set in the ``contextvars.Context`` that entered (None once its exit began).
        self.entered: contextvars.Token[None] | None = None


#: This thread's or task's active blocks, innermost last (a child task copies the tuple, not the right to undo).
_FRAMES: contextvars.ContextVar[tuple[_Frame, ...]] = contextvars.ContextVar("inductor_knobs.frames", default=())
#: Set at each enter: its token names the ``contextvars.Context`` that entered, which alone may exit
#: (``Context.run`` and ``loop.call_soon`` run on the same thread and task, in a copy of it).
_ENTERED: contextvars.ContextVar[None] = contextvars.ContextVar("inductor_knobs.entered")
#: Every thread's and task's active frames, by id, to name a block's owner to another thread (GIL-atomic ops).
_LIVE: dict[int, _Frame] = {}


def live_blocks() -> list[UndoContext]:
    """The blocks active now in every thread and task of the process, oldest first (a snapshot)."""
    return [frame.context for frame in list(_LIVE.values())]


class UndoContext:
    """Plans on enter, applies all or nothing, reverts every change last first on exit; re-entrant.
    Creating or decorating with one imports no torch.  Subclasses implement :meth:`_plan`."""

    strict = False
    #: Whether the plan changes Inductor config (claimed per process before torch 2.12).
    changes_config = True

    def _plan(self) -> tuple[list[Change], Any]:
        """Validate and return (changes in apply order, what ``__enter__`` returns); change nothing."""
        raise NotImplementedError

    def _records(self, life: Life) -> tuple[list[Change], Any]:
        """:meth:`_plan`'s changes living with ``life``, after a claim on process-global config (torch < 2.12)."""
        thread_local = torch_compat.installed(strict=self.strict).config_is_thread_local
        changes, value = self._plan()
        for change in changes:
            if isinstance(change, Lived):
                change.life = life
        if self.changes_config and not thread_local:
            why = f"on this torch ({torch_version()}) Inductor config is process-global (use torch >= 2.12, where it is"
            changes = [Claim(torch_compat.INDUCTOR_CONFIG, f"{why} per thread and task)", repr(self)), *changes]
        return changes, value

    def __enter__(self) -> Any:
        frame = _Frame(self, current_owner())
        changes, value = self._records(frame.life)
        try:  # from the push on, any interrupt (even at the return) unwinds everything
            frame.entered = _ENTERED.set(None)  # the token, not the value, names the Context
            _LIVE[id(frame)] = frame
            _FRAMES.set((*_FRAMES.get(), frame))
            apply_all(changes, frame.applied)
            return value
        except BaseException:
            _finish(frame)
            raise

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:  # an interrupt anywhere in the unwinding is finished below, then re-raised
            found: list[_Frame] = []  # the frame being ended, once found (an interrupt below finishes that one)
            reverting(lambda: self._exit(found), stacklevel=3)
        except KnobsError:
            raise
        except BaseException:
            found = locals().get("found") or []
            _finish(found[0] if found else self._top_frame(owned=True))
            raise
        if exc is None:
            return
        # torch wraps what a backend raises (BackendCompilerFailed); hand the user ours.
        not_applied = unwrap_not_applied(exc)
        if not_applied is not None and not_applied is not exc:
            raise not_applied.with_traceback(None) from exc

    def _exit(self, found: list[_Frame]) -> None:
        found.append(self._own_frame("exit"))
        _unwind(found[0])

    def _top_frame(self, *, owned: bool = False) -> _Frame | None:
        """The innermost frame of this context on this thread's/task's stack (with ``owned``: of the caller's)."""
        me = current_owner() if owned else None
        for frame in reversed(_FRAMES.get()):
            if frame.context is self and (me is None or frame.owner == me):
                return frame
        return None

    def _own_frame(self, how: str) -> _Frame:
        """The innermost frame of this context here; ``NotBlockOwner`` if another owns it, ``KnobsError`` if none."""
        frame = self._top_frame()
        me = current_owner()
        if frame is None:
            elsewhere = [f.owner for f in list(_LIVE.values()) if f.context is self and f.owner != me]
            if elsewhere:
                raise NotBlockOwner(
                    f"{self!r} {how} in {describe_owner(me)}, but it is active in another thread or task: "
                    f"{describe_owner(elsewhere[-1])} entered it; only its owner may end it, so nothing was reverted "
                    "(end it where it was entered)"
                )
            if any(f.context is self and f.owner == me for f in list(_LIVE.values())):
                raise KnobsError(
                    f"{self!r} {how} in {describe_owner(me)}, but it was entered in another contextvars.Context on this "
                    "thread (a callback's copy: loop.call_soon(ctx.start), contextvars.copy_context().run), whose knobs "
                    "only that Context can end: start and stop a block in one Context (keep a copy and run both in it), "
                    "so nothing was reverted"
                )
            raise KnobsError(
                f"{self!r} {how} in {describe_owner(me)}, but this context is not active here: it was never "
                "entered, already exited, or entered in another thread or asyncio task (exit it there)"
            )
        if frame.owner != me:
            raise NotBlockOwner(
                f"{self!r} {how} in {describe_owner(me)}, but {describe_owner(frame.owner)} entered it; only its owner "
                "may end it, so nothing was reverted. End it where it was entered (a child task or thread sees its "
                "parent's knobs but cannot undo them)"
            )
        if frame.entered is not None:
            try:
                _ENTERED.reset(frame.entered)
            except ValueError:
                raise NotBlockOwner(
                    f"{self!r} {how} in a copy of the contextvars.Context that entered it (contextvars.copy_context()"
                    ".run, loop.call_soon, ...): its knobs live in the Context that entered it, so only that Context may "
                    "end it, and nothing was reverted"
                ) from None
            except RuntimeError:  # the token was used: an exit that an interrupt stopped, now finished
                pass
            frame.entered = None
        return frame

    @property
    def active(self) -> bool:
        """Whether this context holds here: entered in this thread/task or a parent's, and not exited yet."""
        return any(frame.context is self and frame.life.alive for frame in _FRAMES.get())

    def start(self) -> Any:
        """Apply now (like ``__enter__``); pair with :meth:`stop` in the same thread/task."""
        return self.__enter__()

    def stop(self) -> None:
        """Revert the most recent :meth:`start` of this context in this thread/task.

        Raises:
            NotBlockOwner: another thread or asyncio task entered it (a parent's block); nothing changes.
            KnobsError: nothing of this context is active here (never started, stopped, or another thread's).
        """
        self._own_frame("stop()")
        self.__exit__(None, None, None)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` so every call runs inside this context: a coroutine's across its awaits, a
        (async) generator's around each resume of the body, not while the caller holds a yielded value."""
        if inspect.isasyncgenfunction(func):
            return self._wrap_async_generator(func)  # type: ignore[return-value]
        if inspect.isgeneratorfunction(func):
            return self._wrap_generator(func)  # type: ignore[return-value]
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self:
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def _wrap_generator(self, func: Callable[..., Generator[Any, Any, Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(func)
        def generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            with self:
                inner = func(*args, **kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                with self:
                    try:
                        value = inner.throw(thrown) if thrown is not None else inner.send(sent)
                    except StopIteration as stop:
                        return stop.value
                thrown = None
                try:
                    sent = yield value
                except GeneratorExit:
                    with self:
                        inner.close()
                    raise
                except BaseException as err:  # noqa: BLE001 - delivered into the body, as a plain generator would
                    thrown = err

        return generator

    def _wrap_async_generator(self, func: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
        @functools.wraps(func)
        async def generator(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            with self:
                inner: Any = func(*args, **kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                with self:
                    try:
                        value = await (inner.athrow(thrown) if thrown is not None else inner.asend(sent))
                    except StopAsyncIteration:
                        return
                thrown = None
                try:
                    sent = yield value
                except GeneratorExit:
                    with self:
                        await inner.aclose()
                    raise
                except BaseException as err:  # noqa: BLE001 - delivered into the body
                    thrown = err

        return generator


def _finish(frame: _Frame | None) -> None:
    """Finish unwinding ``frame`` after an interrupt: retried until it completes (each step is idempotent)."""
    for _ in range(8):
        try:
            if frame is not None:
                _unwind(frame)
            else:  # the frame was already popped: only re-apply blocks left suspended
                _reapply_suspended()
            return
        except BaseException:  # noqa: BLE001 - the caller re-raises the first interrupt
            continue


def _unwind(frame: _Frame) -> None:
    """Revert ``frame`` (out of order: the frames above it first, applied again after); it leaves the stack
    whatever a revert raises, once every revert ran.  Idempotent: run again after an interrupt, it carries on
    where it stopped (the frame stays on the stack until its reverts are done, so the retry knows what is above)."""
    frame.life.end()  # first: contexts that copied the frame's records stop acting on them
    stack = _FRAMES.get()
    errors: list[Exception] = []
    # An interrupt anywhere before the pop leaves the frame on the stack, where the retry finds the blocks above it.
    if frame in stack and stack[-1] is not frame:  # out of order: every live block above is suspended first
        for above in stack[stack.index(frame) + 1 :]:
            above.suspended = above.life.alive
    for above in reversed(stack):  # their undos left, innermost first (all of them on the first run)
        if above.suspended and above.applied:
            _collect(errors, revert_all, above.applied)
    _collect(errors, revert_all, frame.applied)
    _LIVE.pop(id(frame), None)  # every revert ran: the frame leaves the stack, whatever a revert raised
    stack = tuple(f for f in _FRAMES.get() if f is not frame)
    _FRAMES.set(stack)
    if any(above.suspended for above in stack):
        _collect(errors, _reapply_suspended)
    if errors:
        raise errors[0]


def _collect(errors: list[Exception], step: Callable[..., None], *args: Any) -> None:
    """Run ``step(*args)``, adding an ``Exception`` it raises to ``errors`` (an interrupt propagates)."""
    try:
        step(*args)
    except Exception as err:  # noqa: BLE001 - raised by the caller once every step ran
        errors.append(err)


def _reapply_suspended() -> None:
    """Apply again this owner's blocks suspended by an out-of-order exit; a block that cannot be (another thread
    claimed what it changes meanwhile, a value torch now refuses) is ended with nothing of it applied, and a
    ``KnobsError`` names the first such block after all were tried.  An interrupt leaves the rest suspended."""
    me = current_owner()
    refused: list[tuple[_Frame, Exception]] = []
    for above in _FRAMES.get():
        if above.suspended and above.owner == me:
            if not above.life.alive:  # ended meanwhile: nothing of it is applied again
                above.suspended = False
                continue
            try:
                changes, _ = above.context._records(above.life)  # fresh records: salts and priors as they are now
                apply_all(changes, above.applied)  # all or nothing
            except Exception as error:  # noqa: BLE001 - named below; its own exit is then a no-op
                above.life.end()
                _LIVE.pop(id(above), None)
                refused.append((above, error))
            above.suspended = False
    if refused:
        ended, cause = refused[0]
        raise KnobsError(
            f"{ended.context!r} was ended: a block below it exited first, and it could not be applied again "
            f"({type(cause).__name__}: {cause}); nothing of it is applied now, and its own exit does nothing"
        ) from cause


class KnobsContext(UndoContext):
    """Applies a :class:`Knobs` on enter (returning it) and reverts every change on exit; enter raises
    :func:`~inductor_knobs.core.plan.plan`'s ``KnobsError`` subclasses, with nothing left applied."""

    def __init__(self, knobs: Knobs, *, source: str = "knobs", sources: dict[str, str] | None = None) -> None:
        self.knobs = knobs
        self.strict = bool(knobs.strict)
        self.source = source
        self.sources = sources

    def __repr__(self) -> str:
        return f"knobs({', '.join(f'{k}={v!r}' for k, v in self.knobs.to_dict().items())})"

    def _plan(self) -> tuple[list[Change], Knobs]:
        return plan(self.knobs, source=self.source, sources=self.sources), self.knobs


def knobs(spec: Knobs | None = None, /, **kwargs: Any) -> KnobsContext:
    """Return a context manager / decorator that applies knobs to TorchInductor.

    Args:
        spec (Knobs | None): a prebuilt :class:`Knobs` (``Knobs.from_env()``); keywords override it.
        **kwargs: any :class:`Knobs` field (``min_sms`` in SMs, ``max_autotune``, ``gemm_backends``, …), each
            documented there with the torch releases it needs.

    Returns:
        KnobsContext: ``torch.compile`` compiles at the first call, so that call (and recompiles) must run inside it.

    Raises:
        UnknownKnob: an unknown keyword ("did you mean" included).
        InvalidKnobValue: a bad value; torch-dependent checks happen on enter.
    """
    if spec is not None and not isinstance(spec, Knobs):
        hint = f"; did you mean knobs(min_sms={spec!r})?" if isinstance(spec, int) and not isinstance(spec, bool) else ""
        raise InvalidKnobValue(
            f"knobs({spec!r}) is invalid on torch {torch_version()}: allowed an ik.Knobs or keyword arguments{hint}"
        )
    extra = _knobs_from_kwargs(kwargs)
    return KnobsContext(spec.merged(extra) if spec is not None else extra)


#: (torch version, keyword items, their types) -> the validated (immutable) Knobs: a block in a loop validates once.
_KNOBS_BY_KWARGS: dict[tuple[Any, ...], Knobs] = {}
#: Only these values are cached, keyed with their exact types: ``1 == True`` and ``40 == 40.0`` hash
#: alike, and a wrong type must still be refused after an equal valid value was cached.
_CACHED_TYPES = frozenset({bool, int, float, str, type(None)})


def _knobs_from_kwargs(kwargs: dict[str, Any]) -> Knobs:
    types = tuple(map(type, kwargs.values()))
    if not _CACHED_TYPES.issuperset(types) or isinstance(kwargs.get("trace"), str):
        # a container (config=...) can hold 1 for True; a trace directory is probed on the file system every time
        return Knobs.from_kwargs(**kwargs)
    torch = sys.modules.get("torch")
    version = torch.__version__ if torch is not None else torch_version()  # no call once torch is imported
    key = (version, tuple(kwargs.items()), types)  # call-site order: each order is cached once
    found = _KNOBS_BY_KWARGS.get(key)
    return found if found is not None else _remember(key, Knobs.from_kwargs(**kwargs))


def _remember(key: tuple[Any, ...], knobs: Knobs) -> Knobs:
    if len(_KNOBS_BY_KWARGS) >= 256:
        _KNOBS_BY_KWARGS.clear()
    _KNOBS_BY_KWARGS[key] = knobs
    return knobs


def force_gemm_autotune(min_sms: int = 1, backends: str = "ATEN,TRITON", **kwargs: Any) -> KnobsContext:
    """Open the SM gate and turn GEMM autotuning on: ``knobs(min_sms=…, max_autotune_gemm=True, gemm_backends=…)``.

    Args:
        min_sms (int): open the gate for CUDA devices with at least this many SMs (default 1: every GPU).
        backends (str): ``max_autotune_gemm_backends`` (default keeps the ATen fallback).
        **kwargs: further knobs, as for :func:`knobs`; they win over the two above.

    Returns:
        KnobsContext: as :func:`knobs`, raising as it does.
    """
    forced = {"min_sms": min_sms, "max_autotune_gemm": True, "gemm_backends": backends}
    torch = sys.modules.get("torch")
    if kwargs or torch is None or type(min_sms) is not int or type(backends) is not str:
        return KnobsContext(_knobs_from_kwargs({**forced, **kwargs}))
    # The common form, in a loop: a small key (exact types checked above: 40.0 or True never reach this cache).
    key = (torch.__version__, "force_gemm_autotune", min_sms, backends)
    found = _KNOBS_BY_KWARGS.get(key)
    return KnobsContext(found if found is not None else _remember(key, _knobs_from_kwargs(forced)))

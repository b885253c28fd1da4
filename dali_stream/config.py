"""Every setting of a `StreamLoader`, declared once, in groups, held in one frozen object validated when it is made.

`StreamLoader(source, batch_size=32, ...)` builds a `LoaderConfig` from its keyword arguments (or takes one:
`StreamLoader(source, config=cfg)`, with keywords overriding its fields). The loader, `state_dict()`,
`dali-stream bench` and the CLI's flags (`tools/flags.py`) read the settings, their defaults and their help
from here. Checks here are the ones that need no dataset; those that do (unknown feature keys, episode indices,
image sizes against crops) run when the loader opens the dataset.

Declared once, grouped: each setting is a field of one of six sub-configs (`config_groups`: sampling, decoding,
output, caches, storage, world), with its type, default and help, and checked by that group. `LoaderConfig` is a
dataclass inheriting all six, so the settings stay flat where they are used: `LoaderConfig(batch_size=8)`,
`config.batch_size`, `dataclasses.replace(config, seed=1)`, `dataclasses.fields(LoaderConfig)`; `config.decoding`
(any group's name) reads one group as its own frozen sub-config.

`StreamLoader`'s keywords, as a type checker and an editor see them, come from the same fields and no second list:
`StreamLoader.__init__` and `open_meta` take `**settings` and are typed (`loader_signature`, `open_meta_signature`)
with the signature of `LoaderCall`, a dataclass extending `LoaderConfig` with their own four arguments, carried
through a ParamSpec. mypy and pyright derive a dataclass's `__init__` themselves, so they refuse a misspelt setting
(mypy: "did you mean") or a value of the wrong type, and an editor completes each with its default. A TypedDict
(`**settings: Unpack[...]`) was the other way, and it is worse here: a type checker sees a TypedDict only as
written out key by key (one built from the dataclass at run time is invisible to mypy and pyright), which is the
second list this module replaces. What it costs: a field's annotation is what a caller may pass (a list, a torch
dtype), not the narrower form the group stores (a tuple, a name), so code reading the config sees the wider type.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Concatenate, Mapping, Optional, ParamSpec, Sequence, TypeVar, Union

from .config_groups import (
    DECODE_CHOICES,
    DEFAULT_CACHE_BYTES,
    DEFAULT_FOOTER_BYTES,
    DEFAULT_INDEX_BYTES,
    DEPTH_OUTPUT_UNITS,
    GLOBAL_POOL,
    GROUPS,
    IMAGE_DTYPES,
    MEMORY_FORMATS,
    NVDEC_ENGINES,
    TABLE_CACHE_OFF,
    CacheConfig,
    Decode,
    DecodeConfig,
    DepthOutputUnit,
    ImageDtype,
    MemoryFormat,
    NvdecEngine,
    OutputConfig,
    SamplingConfig,
    StorageConfig,
    WorldConfig,
    _offsets,
)
from .errors import ConfigError
from .lerobot_arguments import LEROBOT_ARGUMENTS

if TYPE_CHECKING:
    from .meta.catalog import MixtureMeta
    from .meta.dataset import DatasetMeta
    from .mixture import Member, Mixture

# what this module has always offered its importers, now declared in config_groups
__all__ = ["LoaderConfig", "LoaderCall", "loader_signature", "open_meta_signature", "dali_source_signature", "as_dict", "pool_size", "GROUPS",
           "SamplingConfig", "DecodeConfig", "OutputConfig", "CacheConfig", "StorageConfig", "WorldConfig", "Decode",
           "NvdecEngine", "ImageDtype", "MemoryFormat", "DepthOutputUnit", "DECODE_CHOICES", "NVDEC_ENGINES",
           "IMAGE_DTYPES", "MEMORY_FORMATS", "DEPTH_OUTPUT_UNITS", "DEFAULT_CACHE_BYTES", "DEFAULT_INDEX_BYTES",
           "DEFAULT_FOOTER_BYTES", "GLOBAL_POOL", "TABLE_CACHE_OFF", "_offsets"]

P = ParamSpec("P")
R = TypeVar("R")


# Bases last group first: a dataclass lists its bases' fields base-most first, so they read in `GROUPS`' order.
@dataclass(frozen=True, kw_only=True)
class LoaderConfig(WorldConfig, StorageConfig, CacheConfig, OutputConfig, DecodeConfig, SamplingConfig):
    """The settings of a `StreamLoader` (all keyword-only; `help(LoaderConfig)` lists them by group with their help).
    `config.sampling`, `config.decoding`, `config.output`, `config.caches`, `config.storage` and `config.world` read
    one group as its sub-config."""

    def __post_init__(self) -> None:
        for group in GROUPS.values():  # each group checks and normalises its own settings
            group.__post_init__(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def groups(cls) -> dict[str, tuple[str, ...]]:
        """Group name -> the names of its settings, in `help(LoaderConfig)`'s order."""
        return {name: tuple(f.name for f in dataclasses.fields(group)) for name, group in GROUPS.items()}

    @classmethod
    def make(cls, base: LoaderConfig | None = None, **options: Any) -> LoaderConfig:
        """`base` (or the defaults) with `options` replacing fields; an unknown name is a ConfigError naming
        the closest setting."""
        known = cls.names()
        for name in options:
            if name in LEROBOT_ARGUMENTS:
                raise ConfigError(f"StreamLoader has no setting `{name}` (lerobot's LeRobotDataset argument): "
                                  f"{LEROBOT_ARGUMENTS[name]}")
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else f"; the settings are {list(known)}"
                raise ConfigError(f"StreamLoader has no setting `{name}`{hint}")
        if base is None:
            return cls(**options)
        if not isinstance(base, LoaderConfig):
            raise ConfigError(f"`config` must be a LoaderConfig. Found: {type(base).__name__}")
        return dataclasses.replace(base, **options) if options else base

    def help(self, name: str) -> str:
        return next(f.metadata["help"] for f in dataclasses.fields(self) if f.name == name)

    def _group(self, group: Any) -> Any:
        return group(**{f.name: getattr(self, f.name) for f in dataclasses.fields(group)})

    @property
    def sampling(self) -> SamplingConfig:
        """What a batch is and which samples an epoch draws (`SamplingConfig`)."""
        return self._group(SamplingConfig)

    @property
    def decoding(self) -> DecodeConfig:
        """How each camera is decoded (`DecodeConfig`)."""
        return self._group(DecodeConfig)

    @property
    def output(self) -> OutputConfig:
        """Where batches land and what their images are (`OutputConfig`)."""
        return self._group(OutputConfig)

    @property
    def caches(self) -> CacheConfig:
        """The threads that fetch ahead and the bounds of what is kept (`CacheConfig`)."""
        return self._group(CacheConfig)

    @property
    def storage(self) -> StorageConfig:
        """Where the bytes are and how they are read (`StorageConfig`)."""
        return self._group(StorageConfig)

    @property
    def world(self) -> WorldConfig:
        """This process's place in a job (`WorldConfig`)."""
        return self._group(WorldConfig)


def _settings_doc(group: type) -> str:
    """A group's settings with their default and help (the help lives in field metadata), for `help()`."""
    lines = []
    for f in dataclasses.fields(group):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        lines.append(f"    {f.name} = {default!r}: {f.metadata['help']}")
    return "\n".join(lines)


def _summary(group: type) -> str:
    return " ".join((group.__doc__ or "").split("\n\n")[0].split())


for _group_class in GROUPS.values():
    _group_class.__doc__ = f"{_summary(_group_class)}\n\nSettings (default: help):\n{_settings_doc(_group_class)}"
LoaderConfig.__doc__ = f"{inspect.cleandoc(LoaderConfig.__doc__ or '')}\n\nSettings by group (default: help):\n" + "\n".join(
    f"\n  {name} ({group.__name__}): {_summary(group)}\n{_settings_doc(group)}" for name, group in GROUPS.items())


@dataclass(frozen=True, kw_only=True)
class LoaderCall(LoaderConfig):
    """The arguments of `StreamLoader(...)`, for a type checker (never made): the settings, and the loader's own four.
    tests/loader/test_config.py checks these four against `StreamLoader.__init__`'s and `open_meta`'s."""

    source: Union[str, Mixture, Sequence[Union[str, Member]], DatasetMeta, MixtureMeta, None] = field(
        default=None, kw_only=False)
    config: Optional[LoaderConfig] = None
    repo_id: Optional[str] = None
    root: Union[str, os.PathLike, None] = None


@dataclass(frozen=True, kw_only=True)
class _OpenMetaCall(LoaderCall):
    """The arguments of `open_meta(...)`: a `StreamLoader`'s but a source's metadata, which it makes."""

    source: Union[str, Mixture, Sequence[Union[str, Member]], None] = field(default=None, kw_only=False)


@dataclass(frozen=True, kw_only=True)
class _DaliSourceCall(LoaderCall):
    """The arguments of `dali_stream.dali.Source(...)`: a `StreamLoader`'s, or a `StreamLoader` itself."""

    source: Any = field(default=None, kw_only=False)


def _method_typed_as(model: Callable[P, Any]) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """A decorator giving a method taking `**settings` the signature of `model`'s constructor (after `self`), for a
    type checker; at run time the method is left as it is."""
    return lambda method: method


def _typed_as(model: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """`_method_typed_as` for a function."""
    return lambda function: function


# `StreamLoader.__init__`'s and `open_meta`'s keywords as a type checker and an editor see them: LoaderCall's fields
loader_signature = _method_typed_as(LoaderCall)
dali_source_signature = _method_typed_as(_DaliSourceCall)  # `dali_stream.dali.Source.__init__`'s
open_meta_signature = _typed_as(_OpenMetaCall)


def pool_size(config: LoaderConfig) -> int | None:
    """The planner's pool size: None for a global shuffle (`episode_pool_size='all'`)."""
    return None if config.episode_pool_size == GLOBAL_POOL else int(config.episode_pool_size)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    return value


def as_dict(config: LoaderConfig) -> dict[str, Any]:
    """The settings as JSON-ready values (mappings as dicts, tuples as lists, a function by its name)."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}

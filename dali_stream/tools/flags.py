"""Command-line flags for loader settings, made from `LoaderConfig`'s fields: one definition of each setting's
type, default, choices and help for `dali-stream demo`, `dali-stream bench` and the recipes in `pipelines/`."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Iterable, Literal, Union, get_args, get_origin

from ..config import LoaderConfig
from ..errors import ConfigError

# Older, shorter spellings kept working beside the generated `--episode-pool-size`.
ALIASES = {"episode_pool_size": ("--pool", "--pool-size"), "disk_cache_dir": ("--disk-cache",)}


def _scalar(annotation: Any) -> tuple[Any, tuple | None]:
    """The flag's type and choices: Optional unwrapped, Literal as choices, the scalar arm of a Union."""
    if get_origin(annotation) is Literal:
        return str, get_args(annotation)
    if get_origin(annotation) is Union:
        arms = get_args(annotation)
        words = [w for arm in arms if get_origin(arm) is Literal for w in get_args(arm)]
        if int in arms and words:  # a number or a word (episode_pool_size: 16 or "all")
            return _int_or(tuple(words)), None
        for arm in arms:
            if arm is not type(None) and (arm in (int, float, str) or get_origin(arm) is Literal):
                return _scalar(arm)
    if annotation in (int, float, str):
        return annotation, None
    raise TypeError(f"LoaderConfig setting of type {annotation!r} has no command-line form")


def _int_or(words: tuple[str, ...]) -> Any:
    def parse(text: str) -> int | str:
        if text in words:
            return text
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer or one of {list(words)}, got {text!r}") from None
    parse.__name__ = f"integer or {'/'.join(words)}"
    return parse


def add_loader_flags(parser: argparse.ArgumentParser, names: Iterable[str], **defaults: Any) -> None:
    """`--batch-size`-style flags for the named settings; `defaults` replaces LoaderConfig's default of a flag."""
    hints = typing.get_type_hints(LoaderConfig)
    fields = {f.name: f for f in dataclasses.fields(LoaderConfig)}
    for name in names:
        kind, choices = _scalar(hints[name])
        f = fields[name]
        default = defaults.get(name, None if f.default is dataclasses.MISSING else f.default)
        flags = ("--" + name.replace("_", "-"), *ALIASES.get(name, ()))
        said = f.metadata["help"].replace("%", "%%")
        if name in defaults or "(default" not in said:  # a setting whose help says its default rule keeps that alone
            said += " (default: %(default)s)"
        parser.add_argument(*flags, dest=name, type=kind, choices=choices, default=default, help=said)


def loader_settings(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The named settings from parsed flags, for `StreamLoader(source, **settings)` or `LoaderConfig(...)`."""
    return {name: getattr(args, name) for name in names}


def flag(name: str) -> str:
    """The command-line spelling of setting or argument `name`: batch_size -> --batch-size."""
    return "--" + name.replace("_", "-")


def checked_settings(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """`loader_settings`, validated as `LoaderConfig` validates them, so that a command refuses a bad value before it
    does any work: a `ConfigError` naming the flag (`--batch-size must be a positive integer. Found: -1`)."""
    settings = loader_settings(args, names)
    try:
        LoaderConfig(**settings)
    except ConfigError as exc:
        text = str(exc)
        for name in settings:
            text = text.replace(f"`{name}`", flag(name))
        raise ConfigError(text) from None
    return settings


def require_at_least(args: argparse.Namespace, **least: float) -> None:
    """A `ConfigError` naming the first of the flags `least` names (argument name -> its least value) whose value is
    below it; a flag not given (None) passes."""
    for name, low in least.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise ConfigError(f"{flag(name)} must be at least {low}. Found: {value}")

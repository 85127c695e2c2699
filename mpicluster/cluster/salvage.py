"""What of an invalid inventory did parse, so that the checks spanning fields (files that
must exist, nodes in the CIDR, the Slurm controller a node) still run on it: validate
then reports every problem of the file in one run, not the type errors first and the
rest once they are fixed.

A field whose value failed is left out (its default stands in: it is "lost"); a section
or list item that cannot stand without it (a required field failed) is left out in turn.
A list of sections (nodes, users, partitions) keeps the items that parsed, with their
indexes in the file. The checks ask `Parsed` what was lost, and skip what would read a
stand-in as if the file had said it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from mpicluster.cluster.yamlsource import Loc

T = TypeVar("T")


@dataclass(frozen=True)
class Parsed:
    """Where the inventory the checks get differs from the file: nothing, for a valid one."""

    #: Fields left out: the default stands in for what the file gave.
    lost: frozenset[Loc] = frozenset()
    #: Lists that lost items: the file's indexes of the items kept, in order.
    kept: dict[Loc, tuple[int, ...]] = field(default_factory=dict)

    def is_lost(self, loc: Loc) -> bool:
        """Whether `loc`'s value is a stand-in (it, or a section above it, was left out)."""
        return any(loc[:end] in self.lost for end in range(1, len(loc) + 1))

    def complete(self, loc: Loc) -> bool:
        """Whether the list at `loc` holds every item the file gave."""
        return loc not in self.kept and not self.is_lost(loc)

    def indexed(self, loc: Loc, items: Sequence[T]) -> Iterable[tuple[int, T]]:
        """The items of the list at `loc`, each with its index in the file."""
        return zip(self.kept.get(loc, range(len(items))), items, strict=True)


_FAILED = object()


class _Salvage:
    def __init__(self, bad: set[Loc]):
        self.bad = bad
        self.lost: set[Loc] = set()
        self.kept: dict[Loc, tuple[int, ...]] = {}

    def failed_under(self, loc: Loc) -> bool:
        return any(bad[: len(loc)] == loc for bad in self.bad)

    def fields(self, model: type[BaseModel], data: dict, loc: Loc) -> dict[str, Any]:
        """The fields of `data` to keep: unknown keys dropped, each that failed either
        salvaged or left out (a required one too: the caller finds it missing)."""
        fields: dict[str, Any] = {}
        for key, value in data.items():
            info = model.model_fields.get(key) if isinstance(key, str) else None
            if info is None or info.exclude:
                continue  # an unknown key (reported as one), or one the file cannot set
            here = (*loc, key)
            if not self.failed_under(here):
                fields[key] = value
            elif (salvaged := self.value(info.annotation, value, here)) is not _FAILED:
                fields[key] = salvaged
            else:
                self.lost.add(here)
        return fields

    def value(self, annotation: Any, value: Any, loc: Loc) -> Any:
        """What of one field's value that failed can stand: a section, or a list of
        sections, with its failed parts left out; _FAILED for anything else."""
        for kind in (annotation, *get_args(annotation)):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                return self.model(kind, value, loc)
            if get_origin(kind) is list and isinstance(value, list):
                (item,) = get_args(kind)
                if isinstance(item, type) and issubclass(item, BaseModel):
                    return self.items(item, value, loc)
        return _FAILED

    def model(self, model: type[BaseModel], data: Any, loc: Loc) -> Any:
        if not isinstance(data, dict):
            return _FAILED
        try:
            return model.model_validate(self.fields(model, data, loc))
        except ValidationError:  # a required field failed
            return _FAILED

    def items(self, model: type[BaseModel], values: list, loc: Loc) -> list[BaseModel]:
        kept: list[BaseModel] = []
        indexes: list[int] = []
        for i, value in enumerate(values):
            item = self.model(model, value, (*loc, i))
            if item is not _FAILED:
                kept.append(item)
                indexes.append(i)
        if len(indexes) != len(values):
            self.kept[loc] = tuple(indexes)
        return kept


def salvage(
    model: type[BaseModel], data: dict, bad: set[Loc], **extra: Any
) -> tuple[BaseModel, Parsed]:
    """The top-level `model` from `data`, whose values failed at the `bad` locations (as
    pydantic's errors name them), and what was lost of it; `extra` sets the fields the
    file does not give. Each top-level field is validated on its own, so that one
    required field that failed (the cluster's name) does not lose the whole file: it is
    absent, or an empty list (nodes). The model must have no validators of its own (its
    sections may)."""
    work = _Salvage(bad)
    given = work.fields(model, data, ())
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name not in given or info.exclude:
            if info.is_required():
                work.lost.add((name,))
        else:
            try:
                fields[name] = _adapter(model, name).validate_python(given[name])
            except ValidationError:  # nodes: [] (all of them left out)
                work.lost.add((name,))
        if name not in fields and info.is_required() and get_origin(info.annotation) is list:
            fields[name] = []
    found = model.model_construct(**fields, **extra)
    return found, Parsed(frozenset(work.lost), work.kept)


def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """A validator of one of `model`'s fields, as the model validates it."""
    info = model.model_fields[name]
    kind = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
        return TypeAdapter(kind)  # a section: its own config
    config = {k: v for k, v in model.model_config.items() if k not in ("extra", "frozen")}
    return TypeAdapter(kind, config=ConfigDict(**config))

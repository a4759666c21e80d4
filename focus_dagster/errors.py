"""Errors that tell the user what is wrong, where, and what to do about it."""

from __future__ import annotations


class FocusError(Exception):
    """Base class of every error the platform raises on purpose."""


class ConfigError(FocusError):
    """The configuration (focus.yaml, environment) is unusable."""


class UnknownDatasetError(FocusError, KeyError):
    """A dataset key that is not one of the ten registered datasets."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class DatasetLayoutError(FocusError):
    """A dataset root does not have the layout its publisher distributes (missing file, folder, column)."""


class LabelFileError(FocusError):
    """A label file exists but cannot be decoded or parsed."""


class EmptyDatasetError(FocusError):
    """A dataset has no records at all, which is never what a user wants to benchmark."""


class PathOutsideRootError(FocusError):
    """A path built from a name (a model id, a dataset key, an adapter key) that resolves outside the folder it
    must stay in (the artifact store, the model cache): a `..` in the name, an absolute name, or a link that
    leads out."""


class NotMaterialisedError(FocusError):
    """A step needs what an upstream asset partition writes, and that partition has not been materialised.

    Raised instead of the bare `FileNotFoundError` of the missing file, so that a step downstream of a
    failure names the upstream step to look at (`asset`, `partition`) and the file it did not find (`path`).
    """

    def __init__(self, asset: str | None, partition: str | None, path: str):
        self.asset, self.partition, self.path = asset, partition, path
        what = f"{asset}[{partition}]" if asset else "the asset that writes it"
        super().__init__(
            f"{what} has not been materialised (its last run failed or never ran, or a blocking check upstream "
            f"stopped it): materialise it first; file {path} is missing."
        )


def missing_columns_error(dataset: str, path: str, expected: list[str], found: list[str]) -> DatasetLayoutError:
    """The error for a label file that lacks columns its reader depends on."""
    missing = [c for c in expected if c not in found]
    return DatasetLayoutError(
        f"[{dataset}] {path} lacks required column(s) {missing}.\n"
        f"  expected (at least): {expected}\n"
        f"  found: {found}\n"
        "  Point the dataset root at the publisher's original files, or fix the header to the published spelling."
    )


# The error type of a rule whose message says all, the value included (focus_dagster/config_schema.py `rule`).
CONFIG_RULE = "config_rule"
# Pydantic's wording of a wrong value, said the way focus.yaml is written (mappings, lists, whole numbers).
_WORDING = {
    "model_type": "must be a mapping", "model_attributes_type": "must be a mapping", "dict_type": "must be a mapping",
    "list_type": "must be a list", "tuple_type": "must be a list", "set_type": "must be a list",
    "int_type": "must be a whole number", "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number", "float_type": "must be a number", "float_parsing": "must be a number",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false", "string_type": "must be a string",
    "literal_error": "must be one of {expected}", "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}", "less_than": "must be < {lt}", "less_than_equal": "must be <= {le}",
    "too_short": "must list at least {min_length} item(s)", "too_long": "must list at most {max_length} item(s)",
    "string_too_short": "must have at least {min_length} character(s)",
    "string_too_long": "must have at most {max_length} character(s)",
}


def config_validation_error(where: str, prefix: str, error, model) -> ConfigError:
    """A pydantic ValidationError of one focus.yaml block as a ConfigError: one line per mistake, each naming
    its key path (`datasets.clinic.reader: unknown key; allowed: ...`) and the value it got.

    where: the file; prefix: the block's own path (`datasets.clinic`, "" for the whole file); model: the block's
    pydantic model, whose fields give the keys allowed where an unknown one was found."""
    lines = [_line(prefix, item, model) for item in error.errors()]
    return ConfigError(f"{where}: {lines[0]}" if len(lines) == 1 else f"{where}:\n  " + "\n  ".join(lines))


def _line(prefix: str, item: dict, model) -> str:
    """One mistake: its key path as the file writes it, and what is wrong there."""
    keys, parent = _walk(model, item["loc"])
    path = ".".join([prefix, *keys] if prefix else keys)
    if item["type"] == "extra_forbidden":
        allowed = _fields_of(parent)
        return f"{path}: unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if item["type"] == "missing":
        described = _fields_of(parent).get(keys[-1]) if keys else None
        return f"{path}: required key missing" + (f" ({described})" if described else "")
    if item["type"] == CONFIG_RULE:  # its message names the value already
        return f"{path}: {item['msg']}"
    message = _reworded(item)
    return f"{path}: {message} (got {item.get('input')!r})"


def _reworded(item: dict) -> str:
    """What is wrong with a value, in focus.yaml's words where pydantic's are about Python."""
    # A bound of a float field is a float: 1, not 1.0, as the file writes it.
    ctx = {key: f"{value:g}" if isinstance(value, float) else value for key, value in (item.get("ctx") or {}).items()}
    if item["type"] in ("too_short", "string_too_short") and ctx.get("min_length") == 1:
        return "must not be empty"
    wording = _WORDING.get(item["type"])
    return wording.format(**ctx) if wording else item["msg"].removeprefix("Value error, ")


def _walk(model, loc) -> tuple[list[str], object]:
    """The keys of an error's location as the file writes them, and the annotation holding the last one.

    Pydantic puts the member of a union into the location (a tag such as `<icdr>`, a class name, `str`):
    not a key of the file, so it is left out."""
    keys, annotation, parent = [], model, model
    for part in loc:
        if _is_union_tag(part, annotation):
            continue
        keys.append(str(part))
        parent, annotation = annotation, _inside(annotation, part)
    return keys, parent


def _is_union_tag(part, annotation) -> bool:
    if not isinstance(part, str):
        return False  # a list index
    named = {member.__name__ for member in _members(annotation) if isinstance(member, type)}
    return part.startswith("<") or "[" in part or part in ("str", "int", "float", "bool") or part in named


def _inside(annotation, part):
    """The annotation of what `part` names inside `annotation`: a model's field, a list's item, a dict's value."""
    import typing

    for member in _members(annotation):
        if _is_model(member) and part in member.model_fields:
            return member.model_fields[part].annotation
    for member in _members(annotation):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if origin in (list, tuple, set, frozenset) and args:
            return args[0]
        if origin is dict and len(args) == 2:
            return args[1]
    return None


def _members(annotation) -> list:
    """What an annotation may be, through `Annotated[...]`, `X | None` and unions."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [member for arg in typing.get_args(annotation) for member in _members(arg)]
    return [annotation]


def _fields_of(annotation) -> dict[str, str | None]:
    """The keys a model allows where `annotation` is (with their descriptions), or {} where it cannot tell."""
    model = next((member for member in _members(annotation) if _is_model(member)), None)
    return {name: info.description for name, info in model.model_fields.items()} if model else {}


def _is_model(annotation) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)

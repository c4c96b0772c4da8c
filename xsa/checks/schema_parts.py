"""
The parts the record schemas are built of (xsa/checks/schemas.py, xsa/checks/run_schemas.py): the
validator with its `finite` keyword, a finite number, an integer, a string, an array, a value or
null, an object; the patterns a message names in words; the kinds of value several records share
(seconds, a count, a bpb, a share, a cosine, an entropy, an attention diagnostic).

And `accepts(schema)`: a quick test of a schema, for the records read by the hundred thousand (a
run's metrics.jsonl, a line a step). The jsonschema validator takes about 0.1 ms a line, over ten
seconds for the runs a paper reads; the test, a Python function built once from the schema, takes a
few microseconds. It is only ever a shortcut: True where every keyword holds by a check at least as
strict as the validator's (an integer is a Python int, an enum value of the same Python type), False
where it is unsure, and then the validator judges the record and words each problem. So a record it
passes is one the validator passes, and a record it refuses is judged as if there were no shortcut.
A schema with a keyword it does not know has no quick test (None).
"""

from __future__ import annotations

import math
import operator
import re

from jsonschema import Draft202012Validator, ValidationError, validators

from xsa.archive import FILES

MAX_SECONDS = 1e8  # three years: a longer time is a damaged record, not a slow run


def _finite(validator, wanted, instance, schema):
    # a JSON file may hold NaN and Infinity (the records are written with allow_nan)
    if wanted and isinstance(instance, float) and not math.isfinite(instance):
        yield ValidationError(f"{instance!r} is not finite")


Validator = validators.extend(Draft202012Validator, {"finite": _finite})


def number(**bounds) -> dict:
    """A finite number (a bool is not one) within `bounds` (minimum=0, exclusiveMaximum=20, ...)."""
    return {"type": "number", "finite": True, **bounds}


def integer(**bounds) -> dict:
    return {"type": "integer", **bounds}


def text(**more) -> dict:
    return {"type": "string", **more}


def array(items: dict, **more) -> dict:
    return {"type": "array", "items": items, **more}


def nullable(schema: dict) -> dict:
    """`schema` or null (a value the writer leaves out where it has none: JSON null)."""
    return {**schema, "type": [schema["type"], "null"]}


def pair(items: dict) -> dict:
    """An interval [lo, hi] (lo <= hi is interval_problems' check)."""
    return array(items, minItems=2, maxItems=2)


def obj(properties: dict, *required: str, **more) -> dict:
    return {"type": "object", "properties": properties, **({"required": list(required)} if required else {}), **more}


# the patterns by what a message calls them (a regular expression is no help to the reader of one)
PATTERNS = {"^[0-9a-f]{16}$": "a 16-hex config hash", "^[0-9a-f]{40}$": "a 40-hex git commit",
            "^[0-9a-f]{64}$": "a 64-hex sha256",
            r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?"
            r"(Z|[+-]\d{2}:\d{2})?)?$": "an ISO date (2026-12-02 or 2026-12-02T07:55:27+00:00)",
            "^[0-9a-f]{7,40}/runs/[^/]+/(" + "|".join(f.replace(".", r"\.") for f in FILES) + ")$":
                "a path <commit>/runs/<run id>/{" + ",".join(FILES) + "}"}
HEX16, HEX40, HEX64, ISO_DATE, ARCHIVED_PATH = (text(pattern=p) for p in PATTERNS)

SECONDS = number(minimum=0, maximum=MAX_SECONDS)
COUNT = integer(minimum=0)
POSITIVE = integer(minimum=1)
BOOL = {"type": "boolean"}
RATIO = number(exclusiveMinimum=-1)  # a time ratio less 1 (an overhead): negative when XSA is faster, never -100%
BPB = number(exclusiveMinimum=0, exclusiveMaximum=20)  # bits per byte: 8 is a uniform byte
MARGIN_BPB = number(exclusiveMinimum=-20, exclusiveMaximum=20)  # one bpb less another
SHARE = number(minimum=0, maximum=1)  # an accuracy, an attention mass, a share of a step
CENTERED = number(maximum=1)  # (accuracy - chance) / (1 - chance): 1 at best, below 0 under chance
COSINE = number(minimum=-1, maximum=1)
NATS = number(minimum=0)  # a cross-entropy or an entropy
DIAGNOSTIC = {"cos_y_v": COSINE, "cos_z_v": COSINE, "cos_v_v": COSINE, "diag_mass": SHARE, "first_mass": SHARE,
              "entropy": NATS}  # xsa.diagnostics.METRICS: a head's value, and a layer's mean over its heads

# -- the quick test

_TYPES = {"integer": (int,), "number": (int, float), "string": (str,), "boolean": (bool,),  # type(True) is bool
          "null": (type(None),), "object": (dict,), "array": (list,)}
_BOUNDS = {"minimum": operator.ge, "maximum": operator.le, "exclusiveMinimum": operator.gt,
           "exclusiveMaximum": operator.lt}  # NaN holds none of them: the validator's `finite` words it
_LENGTHS = {"minItems": (list, operator.ge), "maxItems": (list, operator.le),
            "minLength": (str, operator.ge), "maxLength": (str, operator.le)}
_SCALARS = (str, int, float, type(None))


def _of(kinds, test):
    """`test` where the instance is of one of `kinds` (a keyword the validator applies to those only)."""
    return lambda x: type(x) not in kinds or test(x)


def _same(values):
    """An enum's test: a value equal to one of them and of its Python type (1 is not True, nor 1.0)."""
    return lambda x: any(type(x) is type(v) and x == v for v in values)


def _all_of(tests):
    def test(x):
        for t in tests:
            if not t(x):
                return False
        return True
    return test


def _keyword(key, want, schema):
    """The test of one keyword of `schema`, or None where it has none."""
    if key == "type":
        kinds = tuple(k for name in ([want] if isinstance(want, str) else want) for k in _TYPES[name])
        return lambda x: type(x) in kinds
    if key == "finite":
        return (lambda x: type(x) is not float or math.isfinite(x)) if want else (lambda x: True)
    if key in _BOUNDS and type(want) in (int, float):
        op = _BOUNDS[key]
        return _of((int, float), lambda x: op(x, want))
    if key in _LENGTHS and type(want) is int:
        kind, op = _LENGTHS[key]
        return _of((kind,), lambda x: op(len(x), want))
    if key in ("enum", "const"):
        values = want if key == "enum" else [want]
        return _same(list(values)) if all(type(v) in _SCALARS for v in values) else None
    if key == "pattern":
        found = re.compile(want).search  # as the validator: re.search
        return _of((str,), lambda x: found(x) is not None)
    if key == "required":
        return _of((dict,), lambda x: all(k in x for k in want))
    if key == "dependentRequired":
        return _of((dict,), lambda x: all(k not in x or all(d in x for d in need) for k, need in want.items()))
    if key in ("items", "propertyNames") and isinstance(want, dict):
        sub = accepts(want)
        kind, parts = ((list, lambda x: x) if key == "items" else (dict, lambda x: x.keys()))
        return None if sub is None else _of((kind,), lambda x: all(map(sub, parts(x))))
    if key == "anyOf":
        subs = [accepts(s) if isinstance(s, dict) else None for s in want]
        return None if None in subs else (lambda x: any(s(x) for s in subs))
    if key in ("properties", "additionalProperties") and isinstance(want, dict) and "patternProperties" not in schema:
        return _properties(want, schema) if key == "properties" else _additional(want, schema)
    return None


def _properties(props: dict, schema: dict):
    subs = {k: accepts(s) if isinstance(s, dict) else None for k, s in props.items()}
    if None in subs.values():
        return None

    def test(x):
        if type(x) is dict:
            for k, v in x.items():
                sub = subs.get(k)
                if sub is not None and not sub(v):
                    return False
        return True
    return test


def _additional(extra: dict, schema: dict):
    sub, named = accepts(extra), set(schema.get("properties", {}))
    return None if sub is None else _of((dict,), lambda x: all(sub(v) for k, v in x.items() if k not in named))


def _number(schema: dict):
    """The test of a number (or null) within bounds, in one function: most of what a record holds."""
    kinds = tuple(k for name in ([schema["type"]] if isinstance(schema["type"], str) else schema["type"])
                  for k in _TYPES[name])
    finite, bounds = schema.get("finite") is True, [(_BOUNDS[k], v) for k, v in schema.items() if k in _BOUNDS]

    def test(x):
        t = type(x)
        if t not in kinds:
            return False
        if t is float or t is int:
            if finite and t is float and not math.isfinite(x):
                return False
            for op, bound in bounds:
                if not op(x, bound):
                    return False
        return True
    return test


def accepts(schema: dict):
    """A quick test of `schema` (see the module's docstring): a function of a record, True only where
    the validator finds nothing; None where the schema has a keyword it does not know."""
    kinds = [schema.get("type")] if isinstance(schema.get("type"), str) else schema.get("type") or []
    if kinds and set(kinds) <= {"number", "integer", "null"} and set(schema) <= {"type", "finite", *_BOUNDS} \
            and all(type(schema[k]) in (int, float) for k in _BOUNDS if k in schema):
        return _number(schema)
    tests = [_keyword(key, want, schema) for key, want in schema.items()]
    return None if None in tests else _all_of(tests)

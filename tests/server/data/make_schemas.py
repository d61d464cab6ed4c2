#!/usr/bin/env python3
"""Writes schemas.jsonl: the JSON Schema corpus of test_json_schema.py (hand-written building blocks and
their deterministic combinations).  The expected behaviour is judged by python3-jsonschema, never by cinfer;
rerun this only to change the corpus."""
import itertools
import json
import os

LEAVES = [
    {"type": "string"},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"type": "string", "maxLength": 3},
    {"type": "string", "minLength": 4},
    {"type": "string", "pattern": "^[a-z]{2,4}-\\d{2}$"},
    {"type": "string", "pattern": "^(yes|no|maybe)$"},
    {"type": "string", "pattern": "\\d"},
    {"type": "string", "pattern": "^\\w+@\\w+\\.com$"},
    {"type": "string", "pattern": "^[^\"\\\\]*\\\\[\"\\\\]$"},
    {"type": "string", "pattern": "^\\s?[A-F0-9]{2}(:[A-F0-9]{2}){2}$"},
    {"type": "string", "pattern": "^.{1,3}\\n?$"},
    {"type": "string", "pattern": "^[\\u00e0-\\u00ff\\u4e00-\\u4e0f]+$"},
    {"type": "string", "pattern": "^[^a-z]{1,4}$"},
    {"type": "string", "pattern": "^(?:ab)+c?$"},
    {"type": "string", "pattern": "x{2}y{1,}z*?"},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "ipv4"},
    {"type": "string", "format": "hostname"},
    {"type": "string", "format": "uri"},
    {"type": "integer"},
    {"type": "integer", "minimum": 0},
    {"type": "integer", "minimum": -7, "maximum": 7},
    {"type": "integer", "minimum": 10, "maximum": 999},
    {"type": "integer", "exclusiveMinimum": 100},
    {"type": "integer", "minimum": 1990, "maximum": 2024},
    {"type": "integer", "maximum": -3},
    {"type": "integer", "minimum": 123, "exclusiveMaximum": 4567},
    {"type": "integer", "minimum": 0.5, "maximum": 3.5},
    {"type": "number"},
    {"type": "number", "minimum": 0},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
    {"type": "number", "minimum": -2.5, "maximum": 2.5},
    {"type": "number", "maximum": -1},
    {"type": "number", "exclusiveMaximum": 0},
    {"type": "boolean"},
    {"type": "null"},
    {"type": ["string", "null"]},
    {"type": ["integer", "boolean"], "minimum": 3},
    {"type": "string", "nullable": True},
    {"enum": ["red", "green", "blue"]},
    {"enum": [1, "two", None, True, [3], {"four": 4}]},
    {"enum": ["a\"quote", "back\\slash", "tab\there", "\u00e9t\u00e9", "\U0001F600"]},
    {"const": "fixed"},
    {"const": {"k": [1, 2, {"z": None}]}},
    {"type": "string", "enum": ["x", 1, "y"]},
    {},
    True,
    {"type": "array"},
    {"type": "array", "items": {"type": "integer"}},
    {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
    {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}, "minItems": 2},
    {"type": "object"},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 2},
    {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]},
    {"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]},
    {"allOf": [{"type": "integer"}, {"minimum": 5}, {"maximum": 50}]},
]

OBJECTS = []
props_pool = [("name", 0), ("age", 25), ("email", 19), ("tags", 54), ("score", 34), ("when", 17), ("id", 18),
              ("flag", 39), ("color", 44), ("note", 41), ("code", 4), ("count", 26)]
for k in range(1, 9):
    chosen = [props_pool[(k * j + k) % len(props_pool)] for j in range(k)]
    props = {}
    for name, leaf in chosen:
        props[name] = LEAVES[leaf]
    req = [n for i, n in enumerate(props) if i % 2 == 0]
    for ap in (False, None, {"type": "integer"}):
        s = {"type": "object", "properties": props, "required": req}
        if ap is not None:
            s["additionalProperties"] = ap
        OBJECTS.append(s)

RECURSIVE = [
    {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {
        "type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["value"]}},
     "$ref": "#/$defs/node"},
    {"definitions": {"list": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "head": {"type": "string", "maxLength": 3}, "tail": {"$ref": "#/definitions/list"}},
        "required": ["head", "tail"], "additionalProperties": False}]}},
     "$ref": "#/definitions/list"},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/properties/a"}},
     "required": ["a", "b"]},
    {"$schema": "http://json-schema.org/draft-07/schema#", "title": "t", "description": "d",
     "type": "object", "properties": {"x": {"$ref": "#/definitions/pos"}}, "required": ["x"],
     "definitions": {"pos": {"type": "number", "minimum": 0, "examples": [1]}}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
     "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 10},
                    "t": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                          "additionalItems": False}},
     "required": ["n", "t"]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                "required": ["kind", "r"]},
               {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                "required": ["kind", "side"]}]},
    {"type": "object", "properties": {"p": {"type": "string"}}, "allOf": [
        {"properties": {"q": {"type": "integer"}}, "required": ["q"]}, {"required": ["p"]}]},
    {"type": "object", "properties": {"a~b": {"type": "integer"}, "c/d": {"$ref": "#/properties/a~0b"},
                                      "e": {"$ref": "#/properties/c~1d"}}, "required": ["a~b", "c/d", "e"]},
    {"type": "object", "properties": {"v": {"type": "string"}}, "anyOf": [{"required": ["v"]},
                                                                          {"properties": {"w": {"type": "null"}},
                                                                           "required": ["w"]}]},
    {"type": "object", "properties": {"key with \"quotes\" and \\": {"type": "boolean"},
                                      "\u00fcnic\u00f6de": {"type": "integer"}},
     "required": ["key with \"quotes\" and \\", "\u00fcnic\u00f6de"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                      "c": {"type": "integer"}}, "minProperties": 2, "maxProperties": 2},
    {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {"type": "integer",
                                                                                      "minimum": 0,
                                                                                      "maximum": 9},
                                                           "maxItems": 2}, "maxItems": 2}, "maxItems": 2},
]

RECURSIVE += [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 3},
                                      "c": {"type": "boolean"}},
     "required": ["a"], "dependencies": {"a": ["c"], "b": ["d"]}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "dependentRequired": {"b": ["a"]}, "dependentSchemas": {"a": {"required": ["zz"]}}},
    {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}, "z": {"type": "number"}},
     "oneOf": [{"required": ["x"]}, {"required": ["y", "z"]}]},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b", "c"], "const": "b"}}, "required": ["kind"]},
    {"type": "object", "properties": {"s": {"type": "string", "format": "color-hex", "maxLength": 4},
                                      "d": {"type": "string", "format": "date", "minLength": 10}},
     "required": ["s", "d"]},
    {"type": "object", "properties": {"never": {"type": "string", "enum": [1, 2]}, "ok": {"type": "null"},
                                      "neither": {"allOf": [{"type": "string"}, {"type": "integer"}]}},
     "required": ["ok"]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/bad"}, "b": {"$ref": "#/$defs/bad"},
                                      "c": {"type": "integer"}},
     "required": ["c"], "$defs": {"bad": {"type": "integer", "minimum": 5, "maximum": 4}}},
]

RECURSIVE += [
    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
    {"type": "string", "pattern": "^[a-f]{3,6}(-[0-9]{2})?$", "minLength": 3, "maxLength": 9},
    {"type": "array", "items": {"type": "string", "pattern": "^(ab|c){1,3}$", "minLength": 1, "maxLength": 6}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "null"}},
     "dependentRequired": {"a": ["b"], "c": ["a"]}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "dependencies": {"b": ["a"]}},
    {"type": "object", "properties": {"x-a": {"type": "integer"}, "y": {"type": "string", "maxLength": 2},
                                      "x-b": {"type": "number"}},
     "patternProperties": {"^x-": {"minimum": 10, "maximum": 20}, "b$": {"type": "integer"}},
     "required": ["x-a", "y", "x-b"]},
    {"type": "object", "properties": {"id": {"type": "string"}},
     "patternProperties": {"\\d": {"type": "null"}, "^i": {"maxLength": 3}}, "required": ["id"]},
]

corpus = [{"schema": s} for s in LEAVES]
corpus += [{"schema": {"type": "object", "properties": {"v": s}, "required": ["v"]}} for s in LEAVES]
corpus += [{"schema": {"type": "array", "items": s, "maxItems": 3}} for s in LEAVES[:40]]
corpus += [{"schema": s} for s in OBJECTS]
corpus += [{"schema": s} for s in RECURSIVE]
for a, b in itertools.islice(itertools.combinations(range(0, len(LEAVES), 3), 2), 30):
    corpus.append({"schema": {"type": "object", "properties": {"first": LEAVES[a], "second": LEAVES[b]},
                              "required": ["first"], "additionalProperties": False}})
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas.jsonl"), "w") as f:
    for i, c in enumerate(corpus):
        f.write(json.dumps({"id": f"s{i}", **c}, ensure_ascii=False) + "\n")
print(len(corpus))

#!/usr/bin/env python3
"""Extracts the schemas gpusched's OpenAI wire-format test validates against
(tests/openai_schema_test.sh) from OpenAI's OpenAPI document.

The document (github.com/openai/openai-openapi, openapi.yaml, MIT licence)
is ~3 MB; testdata/openai-openapi/schemas.json ships only the response
schemas named in ROOTS and every schema they reach through $ref, verbatim.
Run it on a checkout of that repository to refresh them:

  python3 scripts/openai_schemas.py ../openai-openapi/openapi.yaml COMMIT \
      > testdata/openai-openapi/schemas.json
"""
import json
import sys

import yaml

# The bodies gpusched's gateway sends (tests/e2e/openai_schema.mjs).
ROOTS = [
    "ListModelsResponse",
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "ErrorResponse",
]
PREFIX = "#/components/schemas/"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: openai_schemas.py OPENAPI_YAML COMMIT")
    with open(sys.argv[1]) as f:
        spec = yaml.safe_load(f)
    schemas = spec["components"]["schemas"]
    kept = {}

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    if not value.startswith(PREFIX):
                        sys.exit(f"unexpected $ref {value}")
                    name = value[len(PREFIX):]
                    if name not in kept:
                        kept[name] = schemas[name]
                        walk(schemas[name])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for root in ROOTS:
        kept[root] = schemas[root]
        walk(schemas[root])
    out = {
        "source": "https://github.com/openai/openai-openapi/blob/"
                  f"{sys.argv[2]}/openapi.yaml",
        "openapi": spec.get("openapi"),
        "version": spec["info"].get("version"),
        "license": "MIT, Copyright (c) OpenAI (LICENSE beside this file)",
        "roots": ROOTS,
        "components": {"schemas": dict(sorted(kept.items()))},
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

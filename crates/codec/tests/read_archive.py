#!/usr/bin/env python3
"""Reads unicron archive files with fastavro, an Avro implementation that
shares nothing with the Rust writer, and prints one JSON line per file:

    {"file": ..., "count": <records>, "first_offset": <offset of the first>,
     "record_fields": [<field names of the first record's `record`, in order>],
     "codec": <avro.codec>, "topic": <unicron.topic>, "record": <unicron.record>}

Usage: python3 read_archive.py FILE.avro [FILE.avro ...]
The archive test in crates/codec/tests/archive.rs runs it (docs/archive.md).
"""

import json
import sys

import fastavro


def describe(path):
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        meta = reader.metadata
        records = list(reader)
    first = records[0] if records else None
    return {
        "file": path,
        "count": len(records),
        "first_offset": first["offset"] if first else None,
        "record_fields": list(first["record"].keys()) if first else [],
        "codec": meta.get("avro.codec", "null"),
        "topic": meta.get("unicron.topic"),
        "record": meta.get("unicron.record"),
    }


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    for path in paths:
        print(json.dumps(describe(path), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
